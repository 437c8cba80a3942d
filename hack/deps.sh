#!/usr/bin/env bash
# Installs what Railyard's commands need: Debian packages (when missing), a venv with the project
# and its dev tools. Idempotent; re-runs pip only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[deps] %s\n' "$*" >&2; }

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

# promtool and prometheus (alert rule tests, and the e2e test that sees an alert fire).
apt_install openssl:openssl promtool:prometheus
# The rig's real node (hack/realnode.py) and its images (hack/images.py): a container runtime, the CNI
# plugins, iptables for kube-proxy, mmdebstrap for Debian root filesystems, gcc for the pause binary.
apt_install containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
  iptables:iptables nft:nftables ip:iproute2 mmdebstrap:mmdebstrap gcc:gcc
if ! command -v go >/dev/null 2>&1; then
  apt_install go:golang-go
fi

if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.deps-$(sha256sum pyproject.toml | cut -c1-12)
if [[ ! -f $stamp ]]; then
  say "pip install -e .[dev]"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.deps-*; touch "$stamp"
fi
say "ok"
