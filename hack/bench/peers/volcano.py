"""Volcano v1.14.1 (network-topology-aware scheduling with gang) on the running rig, for `make
compare`: CRDs applied server-side, no webhooks (vcjobs carry what the mutating webhook would
default), HyperNodes from the nodes' topology labels, vc-scheduler and vc-controller-manager run as
processes bound to 127.0.0.1 (their default ports collide with each other)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from bench.common import cluster, served, wait
from bench.peers.translators import volcano_cluster_objects
from railyard.operator.kube.client import KubeApi

PORTS = {"scheduler-metrics": 17291, "scheduler-health": 17292, "controller-metrics": 17293,
         "controller-health": 17294}
NAMESPACE = "volcano-system"
# The plugins the recipe names (shared/design/peers-recipes.md 4.4): gang in the first tier, the
# network-topology-aware plugin binpacking GPUs over HyperNodes in the second.
SCHEDULER_CONF = {
    "actions": "enqueue, allocate, backfill",
    "tiers": [
        {"plugins": [{"name": "priority"}, {"name": "gang", "enablePreemptable": False}, {"name": "conformance"}]},
        {"plugins": [{"name": "drf", "enablePreemptable": False}, {"name": "predicates"}, {"name": "proportion"},
                     {"name": "nodeorder"}, {"name": "binpack"},
                     {"name": "network-topology-aware", "arguments": {
                         "weight": 10, "hypernode.binpack.resources": "nvidia.com/gpu",
                         "hypernode.binpack.resources.nvidia.com/gpu": 10}}]},
    ],
}


def _process(name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    log = cluster.STATE / "logs" / f"{name}.log"
    return subprocess.Popen([str(cluster.binary(name)), *args], stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, env=env)


def start(api: KubeApi, nodes: list[dict]) -> list[subprocess.Popen]:
    if not cluster.binary("vc-scheduler").exists():
        subprocess.run([str(cluster.HACK / "build-binaries.sh"), "volcano"], check=True)
    kubectl = [str(cluster.binary("kubectl")), "--kubeconfig", str(cluster.KUBECONFIG)]
    crds = cluster.binary("vc-scheduler").parent / "crds"
    subprocess.run([*kubectl, "apply", "--server-side", "-f", str(crds)], check=True, capture_output=True)
    wait(lambda: served(api, "/apis/topology.volcano.sh/v1alpha1/hypernodes", "/apis/batch.volcano.sh/v1alpha1/jobs"),
         60, "Volcano CRDs served", interval=0.5)
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    for obj in volcano_cluster_objects(nodes):
        api.request("POST", "/apis/topology.volcano.sh/v1alpha1/hypernodes", obj)
    state: Path = cluster.STATE / "volcano"
    state.mkdir(parents=True, exist_ok=True)
    conf = state / "scheduler.conf"
    conf.write_text(yaml.safe_dump(SCHEDULER_CONF, sort_keys=False))
    common = [f"--kubeconfig={cluster.KUBECONFIG}", "--leader-elect=false", "--kube-api-qps=500",
              "--kube-api-burst=1000", "--enable-healthz=true", "--logtostderr", "-v=2"]
    procs = [
        _process("vc-scheduler", [*common, f"--scheduler-conf={conf}", "--schedule-period=1s",
                                  f"--listen-address=127.0.0.1:{PORTS['scheduler-metrics']}",
                                  f"--healthz-address=127.0.0.1:{PORTS['scheduler-health']}"]),
        _process("vc-controller-manager", [*common, f"--listen-address=127.0.0.1:{PORTS['controller-metrics']}",
                                           f"--healthz-address=127.0.0.1:{PORTS['controller-health']}"],
                 env={"KUBE_POD_NAMESPACE": NAMESPACE, "PATH": "/usr/bin:/bin"}),
    ]
    try:
        for name, port in (("vc-scheduler", "scheduler-health"), ("vc-controller-manager", "controller-health")):
            wait(lambda port=port: cluster._http_ok(f"http://127.0.0.1:{PORTS[port]}/healthz"), 120,
                 f"{name} healthy", interval=0.5)
        wait(lambda: served(api, "/apis/scheduling.volcano.sh/v1beta1/queues/default"), 60,
             "the default Queue (created by vc-scheduler)", interval=0.5)
    except TimeoutError:
        for proc in procs:
            proc.terminate()
        tails = "\n".join(cluster._log_tail(n, 20) for n in ("vc-scheduler", "vc-controller-manager"))
        raise RuntimeError(f"Volcano did not start; last log lines:\n{tails}") from None
    return procs
