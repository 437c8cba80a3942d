"""Kueue v0.19.2 (Topology Aware Scheduling) on the running rig, for `make compare`: CRDs applied
server-side, no webhooks registered (Jobs are created suspended with the queue label), internal
cert management off with a 127.0.0.1 certificate from the rig's CA, the manager run as a process."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from bench.common import cluster, served, wait
from bench.peers.translators import kueue_cluster_objects
from kubernetes.client.exceptions import ApiException
from railyard.operator.kube.client import KubeApi

PORTS = {"health": 17281, "metrics": 17282, "webhook": 17283}
METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # hard-coded in cmd/kueue when cert management is off


def _config(state: Path, frameworks: tuple[str, ...] = ("batch/job",)) -> dict:
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{PORTS['health']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{PORTS['metrics']}"},
            "webhook": {"port": PORTS["webhook"], "host": "127.0.0.1", "certDir": str(state / "certs")},
            "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 200, "burst": 400}, "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": list(frameworks)},
            # Else an aggregated API server starts and wants kube-system's authentication config.
            "featureGates": {"VisibilityOnDemand": False}}


def start(api: KubeApi, namespace: str, gpus: int, frameworks: tuple[str, ...] = ("batch/job",),
          topology: bool = True) -> subprocess.Popen:
    """Kueue running, its queue over `gpus` GPUs for `namespace`. `topology`: Topology Aware Scheduling (off: Kueue
    admits by quota only, and another scheduler — Railyard — places what it admits)."""
    binary = cluster.binary("kueue")
    if not binary.exists():
        subprocess.run([str(cluster.HACK / "build-binaries.sh"), "kueue"], check=True)
    kubectl = [str(cluster.binary("kubectl")), "--kubeconfig", str(cluster.KUBECONFIG)]
    subprocess.run([*kubectl, "apply", "--server-side", "-f", str(binary.parent / "crds")], check=True,
                   capture_output=True)
    # Every kind Kueue indexes at start (a run once died on "no matches for kind Workload": served after
    # ClusterQueue, which alone was waited for).
    for kind in ("clusterqueues", "localqueues", "workloads", "resourceflavors", "topologies"):
        wait(lambda k=kind: served(api, f"/apis/kueue.x-k8s.io/v1beta2/{k}"), 60, f"Kueue CRD {kind} served",
             interval=0.5)
    try:
        api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "kueue-system"}})
    except ApiException as e:
        if e.status != 409:  # there already (an earlier run's)
            raise
    state = cluster.STATE / "kueue"
    (state / "certs").mkdir(parents=True, exist_ok=True)
    pki = cluster.STATE / "pki"
    cluster.issue_cert(pki, "kueue", "/CN=railyard-peer-kueue",
                       "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    METRICS_CERTS.mkdir(parents=True, exist_ok=True)
    for target in (state / "certs", METRICS_CERTS):
        shutil.copy(pki / "kueue.crt", target / "tls.crt")
        shutil.copy(pki / "kueue.key", target / "tls.key")
    config = state / "config.yaml"
    config.write_text(yaml.safe_dump(_config(state, frameworks)))
    log = cluster.STATE / "logs" / "kueue.log"
    # Default (info) logging: its CPU is part of what is measured.
    proc = subprocess.Popen([str(binary), f"--kubeconfig={cluster.KUBECONFIG}", f"--config={config}"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        wait(lambda: cluster._http_ok(f"http://127.0.0.1:{PORTS['health']}/readyz"), 120, "kueue ready", interval=0.5)
    except TimeoutError:
        proc.terminate()
        raise RuntimeError(f"kueue did not become ready; last log lines:\n{cluster._log_tail('kueue', 30)}") from None
    for obj in kueue_cluster_objects(gpus, namespace, topology):
        kind = {"Topology": "topologies"}.get(obj["kind"], obj["kind"].lower() + "s")
        path = (f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/{kind}" if "namespace" in obj["metadata"]
                else f"/apis/kueue.x-k8s.io/v1beta2/{kind}")
        api.request("POST", path, obj)
    return proc
