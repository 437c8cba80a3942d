#!/usr/bin/env bash
# Sourced by hack/deps.sh and hack/build-binaries.sh: makes `go` on PATH the version the control plane's
# modules need (GO_VERSION in hack/versions.env), checked before anything is built.
#   - Go at or above GO_VERSION: used as it is.
#   - Go 1.21 or newer but older: GOTOOLCHAIN=$GO_VERSION, so Go's own toolchain switching fetches the pinned
#     toolchain through the Go module proxy (checked against the checksum database).
#   - No Go, or older than 1.21 (Debian bookworm's golang-go is 1.19): the same toolchain module's zip from the
#     proxy, checked against the SHA-256 pinned in versions.env, unpacked into the cache.
# Needs `versions.env` sourced and `cache` set by the caller.

go_toolchain_say() { printf '[go] %s\n' "$*" >&2; }

# go_version_at_least HAVE WANT: both like 1.26.8 (a missing patch counts as 0).
go_version_at_least() {
  local IFS=.
  # shellcheck disable=SC2206
  local have=($1) want=($2)
  local i
  for i in 0 1 2; do
    local h=${have[i]:-0} w=${want[i]:-0}
    ((10#$h > 10#$w)) && return 0
    ((10#$h < 10#$w)) && return 1
  done
  return 0
}

go_installed_version() {  # prints 1.26.8, or nothing without a usable go
  local out
  out=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null) || return 0
  echo "${out#go}"
}

go_from_proxy() {
  local want=$1 arch
  case $(uname -m) in
    x86_64) arch=amd64 ;;
    aarch64|arm64) arch=arm64 ;;
    *) go_toolchain_say "no pinned Go toolchain for $(uname -m): install Go >= $want"; return 1 ;;
  esac
  local dir="$cache/go/go$want.linux-$arch"
  if [[ ! -x $dir/bin/go ]]; then
    local sum_var="GO_TOOLCHAIN_SHA256_linux_$arch" proxy=${GOPROXY:-https://proxy.golang.org}
    proxy=${proxy%%,*}
    [[ $proxy == direct || $proxy == off ]] && proxy=https://proxy.golang.org
    local url="$proxy/golang.org/toolchain/@v/v0.0.1-go$want.linux-$arch.zip" zip
    go_toolchain_say "Go $want from the module proxy ($url)"
    mkdir -p "$cache/go"
    zip=$(mktemp "$cache/go/toolchain.XXXXXX.zip")
    if ! curl -fsSL -o "$zip" "$url"; then
      rm -f "$zip"; go_toolchain_say "could not download $url: install Go >= $want"; return 1
    fi
    if [[ $(sha256sum "$zip" | cut -d' ' -f1) != "${!sum_var}" ]]; then
      rm -f "$zip"; go_toolchain_say "$url does not match $sum_var in hack/versions.env"; return 1
    fi
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$zip" "$dir.tmp"
    rm -f "$zip"
    mv "$dir.tmp/golang.org/toolchain@v0.0.1-go$want.linux-$arch" "$dir"
    rm -rf "$dir.tmp"
    chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*
  fi
  export PATH="$dir/bin:$PATH" GOTOOLCHAIN=local
}

ensure_go() {
  local want=${GO_VERSION#go} have
  have=$(go_installed_version)
  if [[ -n $have ]] && go_version_at_least "$have" "$want"; then
    return 0
  fi
  if [[ -n $have ]] && go_version_at_least "$have" 1.21; then
    go_toolchain_say "Go $have is older than $want: GOTOOLCHAIN=go$want (Go fetches it through the module proxy)"
    export GOTOOLCHAIN="go$want"
    go version >/dev/null || { go_toolchain_say "Go could not switch to go$want"; return 1; }
    return 0
  fi
  [[ -n $have ]] && go_toolchain_say "Go $have cannot switch toolchains (older than 1.21)"
  go_from_proxy "$want"
}
