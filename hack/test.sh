#!/usr/bin/env bash
# The whole test suite, with phase timings: deps, control-plane build, lint, cluster start, tests.
# Starts the local control plane (and stops it after). Another cluster only by a named opt-in:
# RAILYARD_E2E_CLUSTER=<its API server URL> with KUBECONFIG naming it (tests/support/target.py); an
# exported KUBECONFIG alone is ignored, so `make test` never taints, drains or relabels a cluster it did not start.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -a phases=()
phase() {  # phase NAME COMMAND... ; returns the command's status
  local name=$1; shift
  local t0=$SECONDS rc=0
  printf '\n=== %s\n' "$name"
  # Capture the status explicitly: when a caller writes `phase ... || x`, bash turns `set -e` off
  # inside the function, and a failing command would otherwise be reported as success.
  "$@" || rc=$?
  phases+=("$(printf '%-16s %5ds' "$name" $((SECONDS - t0)))")
  return $rc
}
report() {
  printf '\n=== phase timings\n'
  for p in "${phases[@]}"; do printf '  %s\n' "$p"; done
}
trap report EXIT

phase deps hack/deps.sh
started_cluster=0
if [[ -z ${RAILYARD_E2E_CLUSTER:-} ]]; then
  [[ -n ${KUBECONFIG:-} ]] && echo "[test] KUBECONFIG=$KUBECONFIG ignored: the tests run on the local rig (RAILYARD_E2E_CLUSTER opts another cluster in)"
  unset KUBECONFIG
fi
if [[ -z ${KUBECONFIG:-} ]]; then
  phase build hack/build-binaries.sh
  # The controllers of the workloads Railyard places without owning them (tests/e2e/test_workloads.py).
  phase build-peers hack/build-binaries.sh jobset lws trainer kueue
else
  phase build hack/build-binaries.sh helm  # the chart tests need it against any cluster
fi
phase lint bash -c '.venv/bin/ruff check . && .venv/bin/lint-imports && hack/typecheck.sh'
real_node=()
if [[ -z ${KUBECONFIG:-} ]]; then
  # A fresh local cluster: whatever a demo left running (jobs, its operator) would disturb the tests.
  .venv/bin/python hack/cluster.py down >/dev/null
  # With root, a real kubelet node joins the kwok nodes (its images first); the host is recorded so the
  # check after `down` can tell whether the rig left anything behind.
  if [[ $(id -u) -eq 0 ]]; then
    phase images .venv/bin/python hack/images.py build
    host_before=$(mktemp)
    .venv/bin/python hack/host_record.py snapshot "$host_before"
    real_node=(--real-node)
  fi
  phase cluster-start .venv/bin/python hack/cluster.py up --profile small "${real_node[@]}"
  started_cluster=1
  KUBECONFIG=$(.venv/bin/python hack/cluster.py kubeconfig)
  export KUBECONFIG RAILYARD_LOCAL_RIG=1
fi
status=0
phase tests .venv/bin/pytest tests || status=$?
if [[ $started_cluster == 1 ]]; then
  phase cluster-stop .venv/bin/python hack/cluster.py down
  if [[ ${#real_node[@]} -gt 0 ]]; then
    phase host-check .venv/bin/python hack/host_record.py check "$host_before" || status=$?
  fi
fi
exit $status
