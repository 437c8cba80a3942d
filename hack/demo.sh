#!/usr/bin/env bash
# The main job: build the control plane if needed, start it with the small GPU profile, show it.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/build-binaries.sh
.venv/bin/python hack/cluster.py up --profile "${PROFILE:-small}"
.venv/bin/python hack/cluster.py nodes
echo
echo "The cluster keeps running. KUBECONFIG=$(.venv/bin/python hack/cluster.py kubeconfig); stop it with: make cluster-down"
