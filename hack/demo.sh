#!/usr/bin/env bash
# The README's first command. Builds what the rig needs (etcd, kube-apiserver, -controller-manager,
# -scheduler, kubectl, kwok), starts it with the small GPU profile, runs the operator, applies the examples
# (their PriorityClasses first) and exits non-zero unless every example job is placed and its pods bound.
#
#   hack/demo.sh            # make demo: a rig of the demo's own (one another command left is replaced)
#   hack/demo.sh --on-rig   # the same on the rig $KUBECONFIG names, nothing built or started
#                           # (tests/e2e/test_demo.py: `make test` runs the demo this way)
#   hack/demo.sh stop       # stop the demo's operator, delete the examples it applied
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
say() { printf '[demo] %s\n' "$*"; }
DEADLINE_SECONDS=${DEMO_DEADLINE_SECONDS:-120}

if [[ $mode != --on-rig && $mode != stop ]]; then
  hack/build-binaries.sh etcd kwok kubernetes
  .venv/bin/python hack/cluster.py up --profile "${PROFILE:-small}" --own --started-by "make demo"
  KUBECONFIG=$(.venv/bin/python hack/cluster.py kubeconfig)
  export KUBECONFIG
fi
: "${KUBECONFIG:?hack/demo.sh --on-rig needs KUBECONFIG}"
STATE=$(.venv/bin/python hack/cluster.py state-dir)
# The kubectl built with the control plane, so the demo needs nothing preinstalled.
PATH="$(.venv/bin/python hack/cluster.py bin-dir):$PATH"
export PATH
mkdir -p "$STATE/pids" "$STATE/logs"
pidfile="$STATE/pids/railyard-operator.pid"
log="$STATE/logs/railyard-operator.log"

if [[ $mode == stop ]]; then
  # The jobs first, while the operator still runs: it finishes what their deletion asks of it.
  kubectl delete -f examples/jobs/ --ignore-not-found --wait=true >/dev/null
  kubectl delete -f examples/priorityclasses.yaml --ignore-not-found >/dev/null
  say "examples deleted"
  if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    kill "$(cat "$pidfile")"
    say "operator stopped (pid $(cat "$pidfile"))"
  fi
  rm -f "$pidfile"
  exit 0
fi

.venv/bin/python hack/cluster.py nodes
kubectl apply -f crds/ >/dev/null
# The operator's Lease lives here; the operator itself creates no namespaces.
kubectl create namespace railyard-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl wait --for=condition=Established crd/trainingjobs.railyard.dev --timeout=30s >/dev/null

if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  say "operator already running (pid $(cat "$pidfile"))"
else
  RAILYARD_METRICS_PORT=${RAILYARD_METRICS_PORT:-18080} nohup .venv/bin/railyard operator >"$log" 2>&1 &
  echo $! >"$pidfile"
  say "operator started (pid $!, log $log, metrics :${RAILYARD_METRICS_PORT:-18080})"
fi

# The PriorityClasses the examples name (spec.priorityClassName) first: a job naming a missing class waits.
kubectl apply -f examples/priorityclasses.yaml
kubectl apply -f examples/jobs/
say "waiting up to ${DEADLINE_SECONDS} s for every job to be placed and its pods bound..."
waiting() {  # the examples not yet Released with every pod bound, one "name: why" a line
  .venv/bin/python - <(kubectl get -f examples/jobs/ -o json) \
    <(kubectl get pods -l railyard.dev/job-name -o json) <<'PY'
import json, sys
jobs = json.load(open(sys.argv[1]))["items"]
pods = json.load(open(sys.argv[2]))["items"]
for job in jobs:
    meta, status = job["metadata"], job.get("status") or {}
    placed = next((c for c in status.get("conditions") or [] if c["type"] == "Placed"), {})
    bound = sum(1 for p in pods if p["metadata"]["namespace"] == meta["namespace"]
                and p["metadata"]["labels"].get("railyard.dev/job-name") == meta["name"] and p["spec"].get("nodeName"))
    wanted = status.get("replicas") or job["spec"].get("replicas") or 1
    if placed.get("reason") != "Released" or bound < wanted:
        print(f"{meta['name']}: {placed.get('reason') or 'not decided yet'}, {bound} of {wanted} pods bound"
              + (f" ({placed['message']})" if placed.get("message") else ""))
PY
}
deadline=$((SECONDS + DEADLINE_SECONDS))
status=0
until [[ -z $(waiting) ]]; do
  if (( SECONDS > deadline )); then status=1; break; fi
  sleep 1
done
echo
kubectl get tj
echo
.venv/bin/railyard status
echo
if (( status != 0 )); then
  say "FAILED: not every example job was placed and bound in ${DEADLINE_SECONDS} s:"
  waiting | sed 's/^/  /'
  say "see \`railyard explain NAME\` and the operator log $log"
  exit 1
fi
say "every example job is placed and its pods are bound"
if [[ $mode != --on-rig ]]; then
  echo "The cluster and the operator keep running. To use them:"
  echo "  export KUBECONFIG=$KUBECONFIG PATH=$(dirname "$(command -v kubectl)"):$PWD/.venv/bin:\$PATH"
  echo "  kubectl get tj; railyard explain llama-16n; railyard topology"
  echo "Stop everything with: make cluster-down"
fi
