#!/usr/bin/env bash
# The main job: build the control plane if needed, start it with the small GPU profile, run the
# operator, apply the example TrainingJobs and show where they landed.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/build-binaries.sh
# A rig of the demo's own profile: one left by `make compare` (2,048 nodes full of another peer's pods)
# is refused with what is running and how to stop it, not reused.
.venv/bin/python hack/cluster.py up --profile "${PROFILE:-small}" --exclusive --started-by "make demo"
.venv/bin/python hack/cluster.py nodes
KUBECONFIG=$(.venv/bin/python hack/cluster.py kubeconfig)
STATE=$(.venv/bin/python hack/cluster.py state-dir)
# The kubectl built with the control plane, so the demo needs nothing preinstalled.
PATH="$(.venv/bin/python hack/cluster.py bin-dir):$PATH"
export KUBECONFIG PATH
kubectl apply -f crds/ >/dev/null
# The operator's Lease lives here; the operator itself creates no namespaces.
kubectl create namespace railyard-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl wait --for=condition=Established crd/trainingjobs.railyard.dev --timeout=30s >/dev/null

pidfile="$STATE/pids/railyard-operator.pid"
if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "[demo] operator already running (pid $(cat "$pidfile"))"
else
  RAILYARD_METRICS_PORT=${RAILYARD_METRICS_PORT:-18080} nohup .venv/bin/railyard operator \
    >"$STATE/logs/railyard-operator.log" 2>&1 &
  echo $! >"$pidfile"
  echo "[demo] operator started (pid $!, log $STATE/logs/railyard-operator.log, metrics :${RAILYARD_METRICS_PORT:-18080})"
fi

kubectl apply -f examples/jobs/
echo "[demo] waiting for the jobs to be placed and their pods bound..."
deadline=$((SECONDS + 90))
placed() { kubectl get tj -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Placed")].reason}{"\n"}{end}'; }
wanted() { kubectl get tj -o jsonpath='{range .items[*]}{.status.replicas}{"\n"}{end}' | awk '{s+=$1} END {print s+0}'; }
bound() { kubectl get pods -l railyard.dev/job-name -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true; }
status=0
until [[ $(placed | grep -cv '^Released$' || true) == 0 && $(bound) -ge $(wanted) ]]; do
  if (( SECONDS > deadline )); then echo "[demo] some jobs are still waiting:"; status=1; break; fi
  sleep 1
done
echo
kubectl get tj
echo
.venv/bin/railyard status
echo
echo "The cluster and the operator keep running: KUBECONFIG=$KUBECONFIG"
echo "Try: kubectl get tj; kubectl get pods -o wide; railyard plan --kubeconfig \$KUBECONFIG --jobs examples/jobs/llama-16n.yaml"
echo "Stop everything with: make cluster-down"
if (( status != 0 )); then
  echo "[demo] FAILED: not every example job was placed and bound in 90 s (see kubectl get tj above and"
  echo "       the operator log $STATE/logs/railyard-operator.log)"
fi
exit $status
