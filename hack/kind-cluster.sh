#!/usr/bin/env bash
# A kind cluster whose workers carry Railyard's topology labels and advertise fake nvidia.com/gpu
# capacity, for machines with Docker and network access. NOT exercised in CI here: this workplace
# cannot pull container images. Usage: hack/kind-cluster.sh [workers=4] [cluster-name=railyard]
set -euo pipefail
workers=${1:-4}
name=${2:-railyard}
command -v kind >/dev/null || { echo "error: kind is not installed (go install sigs.k8s.io/kind@latest)"; exit 1; }
command -v kubectl >/dev/null || { echo "error: kubectl is not installed"; exit 1; }

config=$(mktemp)
python3 - "$workers" > "$config" <<'PY'
import sys
workers = int(sys.argv[1])
print("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane")
for i in range(workers):
    leaf, tor = i // 4, i // 2
    labels = {
        "topology.railyard.dev/spine": "spine-0", "topology.railyard.dev/leaf": f"leaf-0-{leaf}",
        "topology.railyard.dev/tor": f"tor-0-{leaf}-{tor}", "topology.railyard.dev/gpu-rail": "0.1.2.3.4.5.6.7",
        "topology.railyard.dev/gpu-numa": "0.0.0.0.1.1.1.1", "topology.railyard.dev/gpu-nvlink": "0.0.0.0.0.0.0.0",
    }
    print("- role: worker\n  labels:")
    for key, value in labels.items():
        print(f'    {key}: "{value}"')
PY
kind create cluster --name "$name" --config "$config"
for node in $(kubectl get nodes -l topology.railyard.dev/tor -o name); do
  # No real GPUs in kind: advertise 8 through the status subresource (the device plugin would).
  kubectl patch "$node" --subresource=status --type=merge \
    -p '{"status":{"capacity":{"nvidia.com/gpu":"8"},"allocatable":{"nvidia.com/gpu":"8"}}}'
done
kubectl apply -f "$(dirname "$0")/../crds/"
echo "kind cluster '$name' ready: export KUBECONFIG via 'kind export kubeconfig --name $name'; then make test"
