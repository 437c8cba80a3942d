#!/usr/bin/env bash
# Installs what Railyard's commands need, and only that: Debian packages when missing, the Go toolchain the
# control plane's modules need, and a venv with the project, railyard-worker and the dev tools. Idempotent;
# re-runs pip only when a pyproject.toml changed.
#
#   hack/deps.sh          # everything `make test` uses (the real node's container runtime, promtool, ...)
#   hack/deps.sh --demo   # what `make demo` uses: openssl for the rig's certificates, Go, the venv
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[deps] %s\n' "$*" >&2; }
demo=0
[[ ${1:-} == --demo ]] && demo=1

apt_install() {
  local missing=()
  for pair in "$@"; do
    local cmd=${pair%%:*} pkg=${pair##*:}
    { command -v "$cmd" >/dev/null 2>&1 || [[ -x $cmd ]]; } || missing+=("$pkg")
  done
  [[ ${#missing[@]} -eq 0 ]] && return
  if [[ $(id -u) -ne 0 ]]; then
    say "missing Debian packages: ${missing[*]} (run as root or install them)"; exit 1
  fi
  say "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Go first: a machine whose Go is too old learns it now, not when a build fails minutes in.
# shellcheck disable=SC1091
source hack/versions.env
cache=${RAILYARD_CACHE:-$HOME/.cache/railyard}
# shellcheck disable=SC1091
source hack/go-toolchain.sh
apt_install curl:curl sha256sum:coreutils
ensure_go || { say "no Go >= $GO_VERSION (see above)"; exit 1; }
say "go: $(go env GOVERSION)"

# The rig's certificates (both commands).
apt_install openssl:openssl
if [[ $demo == 0 ]]; then
  # promtool and prometheus (alert rule tests, and the e2e test that sees an alert fire).
  apt_install promtool:prometheus
  # The rig's real node (hack/realnode.py) and its images (hack/images.py): a container runtime, the CNI
  # plugins, iptables for kube-proxy, mmdebstrap for Debian root filesystems, gcc for the pause binary.
  apt_install containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
    iptables:iptables nft:nftables ip:iproute2 mmdebstrap:mmdebstrap gcc:gcc
fi

if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.deps-$(cat pyproject.toml worker/pyproject.toml | sha256sum | cut -c1-12)
if [[ ! -f $stamp ]]; then
  say "pip install -e worker/ -e .[dev]"
  # pip's own output only when it fails (setuptools warns about every editable install).
  pip_log=$(mktemp)
  if ! { .venv/bin/python -m pip install -q --upgrade pip &&
         .venv/bin/python -m pip install -q -e worker/ -e '.[dev]'; } >"$pip_log" 2>&1; then
    cat "$pip_log" >&2; rm -f "$pip_log"; say "pip install failed"; exit 1
  fi
  rm -f "$pip_log"
  rm -f .venv/.deps-*; touch "$stamp"
fi
say "ok"
