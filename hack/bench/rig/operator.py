#!/usr/bin/env python3
"""Operator benchmark on the superpod-2k profile (2,048 kwok nodes x 8 GPUs). Prints JSON.

1. baseline: 200 gangs (sizes 1, 2, 4, 8, 16 x 8 GPUs; 1,240 pods) as plain batch/v1 Jobs, bound by
   kube-scheduler alone, on a fresh rig;
2. railyard: the same gangs as TrainingJobs through the operator, on a fresh rig; the ratio of bound
   pods per second (same run, same machine), API requests per pod by verb and resource for both
   (apiserver_request_total deltas; node and lease heartbeats left out);
3. load: 20,000 other pods on the same rig, a freshly started operator (time to list, RSS), a
   128-replica job creation -> all bound (p50 over BENCH_RUNS), then 200 pending jobs: placement loop
   iteration p99 and event-loop lag from the operator's own histograms.
Restarts the local rig (twice).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from bench.common import HACK, after_gc_discovery, arguments, cluster, fresh_cluster, percentile, rss_mib, wait
from bench.launcher import OperatorProcess
from railyard.operator.kube.client import KubeApi
from railyard.topology.api.job import GROUP, PLURAL, VERSION

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
BACKGROUND_PODS = int(os.environ.get("BENCH_BACKGROUND_PODS", "20000"))
NS = "bench"
JOBS = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}"
SIZES = [1, 2, 4, 8, 16]
BURST = {f"burst-{i}": SIZES[i % len(SIZES)] for i in range(200)}
CONTAINER = {"name": "t", "image": "registry.invalid/t:0", "resources": {"limits": {"nvidia.com/gpu": 8}}}


def training_job(name: str, replicas: int, in_place: bool = False, **topology) -> dict:
    spec: dict = {"replicas": replicas, "template": {"spec": {"containers": [CONTAINER]}}}
    if in_place:
        spec["faultPolicy"] = {"restartStrategy": "InPlace"}
    if topology:
        spec["topology"] = topology
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name}, "spec": spec}


def batch_job(name: str, replicas: int) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": replicas, "completions": replicas, "completionMode": "Indexed",
                     "template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}}}


class PodWatch:
    """When each pod in the namespace was first seen released (no scheduling gate) and bound, from one
    watch stream (polling pod lists would load the API server being measured)."""

    def __init__(self) -> None:
        self.bound: dict[str, float] = {}
        self.created: dict[str, float] = {}  # first seen
        self.node: dict[str, str] = {}  # pod -> the node it was bound to
        self.released: dict[str, float] = {}
        self.finished: dict[str, float] = {}  # succeeded, failed or deleted
        self.running: dict[str, float] = {}  # first seen Running (kwok's pod-ready)
        self.labels: dict[str, dict[str, str]] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        api = KubeApi(workers=1)
        path = f"/api/v1/namespaces/{NS}/pods"
        rv = api.list_page(path, 1, None)["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            try:
                for event in api.watch(path, rv, 5):
                    pod = event.get("object") or {}
                    if event.get("type") == "ERROR":  # 410 Gone: the version was compacted away
                        raise RuntimeError(pod.get("message") or "watch error")
                    rv = (pod.get("metadata") or {}).get("resourceVersion") or rv
                    self._seen(event.get("type"), pod)
                    if self._stop.is_set():
                        return
            except Exception as e:  # an overloaded API server (a 12k-node rig) drops streams: list, go on
                print(f"# PodWatch: {e!r}; re-listing", file=sys.stderr, flush=True)
                rv = api.list_page(path, 1, None)["metadata"]["resourceVersion"]
                for pod in api.list_all(path):  # seen late, never missed (first sightings are kept)
                    self._seen("MODIFIED", pod)

    def _seen(self, event_type: str | None, pod: dict) -> None:
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return  # a BOOKMARK: only its resourceVersion counts
        name = pod["metadata"]["name"]
        if event_type in ("ADDED", "MODIFIED"):
            self.created.setdefault(name, time.monotonic())
            spec = pod.get("spec") or {}
            self.labels.setdefault(name, pod["metadata"].get("labels") or {})
            if not spec.get("schedulingGates"):
                self.released.setdefault(name, time.monotonic())
            if spec.get("nodeName"):  # the node first: a reader that sees the pod bound reads its node
                self.node.setdefault(name, spec["nodeName"])
                self.bound.setdefault(name, time.monotonic())
            if (pod.get("status") or {}).get("phase") == "Running":
                self.running.setdefault(name, time.monotonic())
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                self.finished.setdefault(name, time.monotonic())
        elif event_type == "DELETED":
            self.finished.setdefault(name, time.monotonic())

    def stop(self) -> None:
        self._stop.set()


_SAMPLE = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
_NOISE = {"leases", "nodes", "nodes/status"}  # kwok heartbeats: unrelated to placing pods


def api_requests(api: KubeApi) -> Counter[str]:
    """apiserver_request_total summed by 'VERB resource[/subresource]'."""
    response = api._send("GET", "/metrics", content_type="text/plain")
    out: Counter[str] = Counter()
    for line in response.read().decode().splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        if resource in _NOISE or labels.get("verb") in ("WATCH", "CONNECT"):
            continue
        out[f"{labels.get('verb')} {resource}"] += int(float(m.group("value")))
    return out


def per_pod(before: Counter[str], after: Counter[str], pods: int) -> dict[str, float]:
    delta = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0}
    out = {k: round(v / pods, 3) for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v / pods >= 0.005}
    out["total"] = round(sum(delta.values()) / pods, 3)
    out["writes"] = round(sum(v for k, v in delta.items() if k.split()[0] in ("POST", "PUT", "PATCH", "DELETE"))
                          / pods, 3)
    return out


COMPONENTS = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kwok")


def cpu_seconds(extra: dict[str, int]) -> dict[str, float]:
    """user+system CPU seconds of each rig component (and `extra` processes) so far."""
    pids = {c: int((cluster.STATE / "pids" / f"{c}.pid").read_text()) for c in COMPONENTS}
    out = {}
    for name, pid in {**pids, **extra}.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def burst(api: KubeApi, path: str, build, extra: dict[str, int] | None = None) -> dict:
    total = sum(BURST.values())
    watcher = PodWatch()
    before = api_requests(api)
    cpu_before = cpu_seconds(extra or {})
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: api.request("POST", path, build(*kv)), BURST.items()))
    wait(lambda: len(watcher.bound) >= total, 900, "all burst pods bound", interval=0.2)
    seconds = max(watcher.bound.values()) - t0
    cpu_after = cpu_seconds(extra or {})
    watcher.stop()
    after = api_requests(api)
    return {"pods": total, "all_bound_seconds": round(seconds, 2), "pods_bound_per_second": round(total / seconds, 1),
            "api_requests_per_pod": per_pod(before, after, total),
            "cpu_seconds": {k: round(cpu_after[k] - cpu_before[k], 1) for k in cpu_after}}


def settled(api: KubeApi) -> bool:
    """Every node usable again (cluster.node_usable) after faults: both schedulers, and every stage of
    a bench, start from the same cluster. A fresh rig's nodes are usable already (create_nodes)."""
    return all(cluster.node_usable(node) for node in api.list_all("/api/v1/nodes"))


def start_rig() -> tuple[dict, KubeApi]:
    figures = fresh_cluster("superpod-2k", upstream_lifecycle=True)
    api = KubeApi(workers=32)
    t0 = time.monotonic()
    wait(lambda: settled(api), 300, "nodes without not-ready taints", interval=1)
    figures["nodes_untainted_seconds"] = round(time.monotonic() - t0, 1)
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    return figures, api


def apply_crds() -> float:
    """Install Railyard's CRDs on the rig; returns when (time.monotonic()), for after_gc_discovery."""
    applied = time.monotonic()
    subprocess.run([str(cluster.binary("kubectl")), "--kubeconfig", str(cluster.KUBECONFIG), "apply", "-f",
                    str(HACK.parent / "crds")], check=True, capture_output=True)
    return applied


def start_operator(name: str, reports: bool = False) -> tuple[OperatorProcess, int, Path]:
    """`reports`: with a report endpoint (an InPlace restart keeps pods only when their supervisors can hear of it)."""
    api = KubeApi(workers=1)
    if not any(n["metadata"]["name"] == "railyard-bench" for n in api.list_all("/api/v1/namespaces")):
        api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "railyard-bench"}})
    log_path = cluster.STATE / "logs" / f"{name}.log"
    operator = OperatorProcess(cluster.KUBECONFIG, "railyard-bench", log_path, metrics_port=18080, health_port=0,
                               report_port=None if reports else 0)
    return operator, operator.metrics_port, log_path


def rig_with_operator(name: str) -> tuple[KubeApi, OperatorProcess, int]:
    """A fresh superpod-2k rig with the CRD applied and an operator that has listed everything."""
    _, api = start_rig()
    apply_crds()
    operator, port, _ = start_operator(name)
    wait(lambda: gauge(scrape(port), "railyard_state_synced") == 1, 60, "state synced")
    return api, operator, port


def scrape(port: int) -> str:
    """The operator's metrics; empty until its metrics server is up."""
    try:
        return requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except requests.ConnectionError:
        return ""


def progress(figures: dict) -> None:
    print(json.dumps(figures), file=sys.stderr, flush=True)


def histogram_quantile(text: str, name: str, q: float) -> float | None:
    """The upper bound of the bucket holding quantile q (Prometheus-style, without interpolation)."""
    buckets = [(float("inf") if le == "+Inf" else float(le), float(v)) for le, v in
               re.findall(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', text, re.M)]
    if not buckets or buckets[-1][1] == 0:
        return None
    target = q * buckets[-1][1]
    return next(le for le, count in buckets if count >= target)


def gauge(text: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def create_background_pods(api: KubeApi, count: int, nodes: list[str]) -> float:
    """`count` pods bound (nodeName) round-robin across the nodes: no GPUs, a little cpu."""
    t0 = time.monotonic()

    def create(i: int) -> None:
        api.request("POST", "/api/v1/namespaces/background/pods", {
            "metadata": {"name": f"bg-{i}"},
            "spec": {"nodeName": nodes[i % len(nodes)], "containers": [
                {"name": "c", "image": "registry.invalid/bg:0", "resources": {"requests": {"cpu": "10m"}}}]}})

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(create, range(count)))
    return round(time.monotonic() - t0, 1)


def main() -> None:
    arguments(__doc__)
    figures: dict = {"machine": {"cpus": os.cpu_count()}}

    # 1. Baseline: kube-scheduler alone.
    rig, api = start_rig()
    figures["rig"] = rig
    figures["baseline_batch_jobs"] = burst(api, f"/apis/batch/v1/namespaces/{NS}/jobs", batch_job)
    progress(figures)

    # 2. Railyard, on a fresh rig.
    _, api = start_rig()
    crds_applied = apply_crds()
    operator, port, log_path = start_operator("bench-operator")
    try:
        wait(lambda: b"became leader" in log_path.read_bytes(), 60, "leader")
        wait(lambda: gauge(scrape(port), "railyard_state_synced") == 1, 60, "state synced")
        after_gc_discovery(crds_applied)
        figures["railyard"] = burst(api, JOBS, training_job, {"railyard-operator": operator.pid})
        base = figures["baseline_batch_jobs"]["pods_bound_per_second"]
        figures["ratio_railyard_to_kube_scheduler_pods_per_second"] = round(
            figures["railyard"]["pods_bound_per_second"] / base, 3)
        held = Counter((p["spec"]["nodeName"], g) for p in api.list_all(f"/api/v1/namespaces/{NS}/pods")
                       for g in p["metadata"]["annotations"]["railyard.dev/gpus"].split(","))
        figures["railyard"]["double_booked_gpus"] = sum(1 for v in held.values() if v > 1)
        figures["railyard"]["operator_peak_rss_mib"] = rss_mib(operator.pid, "VmHWM")
        progress(figures)
        for name in BURST:
            api.request("DELETE", f"{JOBS}/{name}")
        wait(lambda: not api.list_all(f"/api/v1/namespaces/{NS}/pods"), 600, "burst pods gone", interval=1)
    finally:
        operator.stop(timeout=30)

    # 3. Under load: 20,000 other pods, a fresh operator.
    load: dict = {}
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "background"}})
    nodes = sorted(n["metadata"]["name"] for n in api.list_all("/api/v1/nodes"))
    load["background_pods"] = BACKGROUND_PODS
    load["background_create_seconds"] = create_background_pods(api, BACKGROUND_PODS, nodes)
    operator, port, log_path = start_operator("bench-operator-load")
    try:
        t0 = time.monotonic()
        wait(lambda: gauge(scrape(port), "railyard_state_synced") == 1, 300, "state synced", interval=0.2)
        load["operator_start_to_synced_seconds"] = round(time.monotonic() - t0, 2)
        load["operator_rss_mib_synced"] = rss_mib(operator.pid)
        watcher = PodWatch()
        times = []
        for run in range(RUNS):
            name = f"big-{run}"
            t0 = time.monotonic()
            api.request("POST", JOBS, training_job(name, 128))
            mine = [f"{name}-{r}" for r in range(128)]
            wait(lambda m=mine: all(p in watcher.bound for p in m), 120, f"{name} bound", interval=0.02)
            times.append(max(watcher.bound[p] for p in mine) - t0)
            api.request("DELETE", f"{JOBS}/{name}")
            wait(lambda n=name: not api.list_all(f"/api/v1/namespaces/{NS}/pods",
                                                 [("labelSelector", f"railyard.dev/job-name={n}")]),
                 120, f"{name} gone", interval=0.2)
        watcher.stop()
        load["job_128_create_to_all_bound_seconds"] = {"p50": percentile(times, 50), "max": round(max(times), 3),
                                                       "runs": RUNS}
        progress(load)
        # 200 pending jobs: each needs more whole nodes than one TOR has.
        before = scrape(port)
        for i in range(200):
            api.request("POST", JOBS, training_job(f"pending-{i}", 40, requiredTier="tor"))
        wait(lambda: gauge(scrape(port), "railyard_queue_length") >= 200, 120, "200 jobs queued", interval=0.5)
        time.sleep(30)  # a measurement window (not a synchronisation): the loop runs on its own timers
        after = scrape(port)
        load["pending_jobs"] = 200
        load["iteration_p99_seconds_le"] = histogram_quantile(after, "railyard_placement_iteration_seconds", 0.99)
        load["event_loop_lag_p99_seconds_le"] = histogram_quantile(after, "railyard_event_loop_lag_seconds", 0.99)
        load["iterations_total"] = gauge(after, "railyard_placement_iteration_seconds_count")
        load["iterations_before_pending"] = gauge(before, "railyard_placement_iteration_seconds_count")
        load["operator_rss_mib"] = rss_mib(operator.pid)
        load["operator_peak_rss_mib"] = rss_mib(operator.pid, "VmHWM")
    finally:
        operator.stop(timeout=30)
    figures["under_load"] = load
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
