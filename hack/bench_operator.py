#!/usr/bin/env python3
"""Operator figures on the superpod-2k profile (2,048 kwok nodes): creation -> all 128 pods bound for a
128-replica job; 200 jobs created at once (all placed, zero double-booked GPUs, pods released per
second); operator resident memory. Prints JSON. Restarts the local rig."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_common import HACK, cluster, fresh_cluster, percentile, rss_mib, wait
from railyard.operator.apiclient import KubeApi
from railyard.topology.api import GROUP, PLURAL, VERSION

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
JOBS = f"/apis/{GROUP}/{VERSION}/namespaces/bench/{PLURAL}"


def job(name: str, replicas: int) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "t", "image": "registry.invalid/t:0", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}


class PodWatch:
    """Times when each bench pod was first seen created, released (no gate) and bound, from one watch
    stream: polling full pod lists would itself load the API server we are measuring."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.released: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kubernetes import client, config, watch

        core = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.KUBECONFIG)))
        while not self._stop.is_set():
            for event in watch.Watch().stream(core.list_namespaced_pod, "bench", timeout_seconds=5,
                                              label_selector="railyard.dev/job-name"):
                pod, now = event["object"], time.monotonic()
                name = pod.metadata.name
                if event["type"] == "DELETED":
                    for d in (self.created, self.released, self.bound):
                        d.pop(name, None)
                    continue
                self.created.setdefault(name, now)
                if not pod.spec.scheduling_gates:
                    self.released.setdefault(name, now)
                if pod.spec.node_name:
                    self.bound.setdefault(name, now)
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()


def pods(api: KubeApi, selector: str | None = None) -> list[dict]:
    query = [("labelSelector", selector or "railyard.dev/job-name")]
    return api.request("GET", "/api/v1/namespaces/bench/pods", query=query)["items"]


def main() -> None:
    figures: dict = fresh_cluster("superpod-2k")
    kubectl = str(cluster.binary("kubectl"))
    subprocess.run([kubectl, "--kubeconfig", str(cluster.KUBECONFIG), "apply", "-f", str(HACK.parent / "crds")],
                   check=True, capture_output=True)
    api = KubeApi(workers=32)
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
    log = open(cluster.STATE / "logs" / "bench-operator.log", "wb")  # noqa: SIM115
    env = {**os.environ, "KUBECONFIG": str(cluster.KUBECONFIG), "RAILYARD_METRICS_PORT": "0",
           "RAILYARD_NAMESPACE": "railyard-bench"}
    operator = subprocess.Popen([str(Path(sys.executable).parent / "railyard"), "operator"], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
    try:
        wait(lambda: b"became leader" in (cluster.STATE / "logs" / "bench-operator.log").read_bytes(), 60, "leader")
        figures["operator_rss_mib_idle_2048_nodes"] = rss_mib(operator.pid)

        watcher = PodWatch()
        # A 128-replica job: creation -> every pod bound.
        times = []
        for run in range(RUNS):
            name = f"big-{run}"
            t0 = time.monotonic()
            api.request("POST", JOBS, job(name, 128))
            mine = [f"{name}-{r}" for r in range(128)]
            wait(lambda m=mine: all(p in watcher.bound for p in m), 120, f"{name} bound", interval=0.02)
            times.append(max(watcher.bound[p] for p in mine) - t0)
            api.request("DELETE", f"{JOBS}/{name}")
            wait(lambda n=name: not pods(api, f"railyard.dev/job-name={n}"), 120, f"{name} gone", interval=0.2)
        figures["job_128_create_to_all_bound_seconds"] = {"p50": percentile(times, 50), "max": round(max(times), 3),
                                                          "runs": RUNS}

        # 200 jobs at once.
        sizes = [1, 2, 4, 8, 16]
        wanted = {f"burst-{i}": sizes[i % len(sizes)] for i in range(200)}
        t0 = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda kv: api.request("POST", JOBS, job(*kv)), wanted.items()))
        created = time.monotonic() - t0
        total = sum(wanted.values())

        burst = [f"{name}-{r}" for name, replicas in wanted.items() for r in range(replicas)]
        wait(lambda: all(p in watcher.released for p in burst), 600, "all burst pods released", interval=0.2)
        wait(lambda: all(p in watcher.bound for p in burst), 600, "all burst pods bound", interval=0.2)
        watcher.stop()
        first_created = min(watcher.created[p] for p in burst)
        released_at = max(watcher.released[p] for p in burst) - t0
        bound_at = max(watcher.bound[p] for p in burst) - t0
        items = pods(api)
        held = Counter((p["spec"]["nodeName"], g) for p in items
                       for g in p["metadata"]["annotations"]["railyard.dev/gpus"].split(","))
        jobs = api.request("GET", JOBS)["items"]
        placed = sum(1 for j in jobs if any(c["type"] == "Placed" and c["reason"] == "Released"
                                            for c in (j.get("status") or {}).get("conditions") or []))
        figures["burst_200_jobs"] = {
            "pods": total, "jobs_placed": placed, "double_booked_gpus": sum(1 for v in held.values() if v > 1),
            "create_requests_seconds": round(created, 2), "all_released_seconds": round(released_at, 2),
            "all_bound_seconds": round(bound_at, 2), "pods_released_per_second": round(total / released_at, 1),
            "pods_released_per_second_after_first_pod": round(
                total / (max(watcher.released[p] for p in burst) - first_created), 1),
        }
        figures["operator_rss_mib_after_burst"] = rss_mib(operator.pid)
        figures["operator_peak_rss_mib"] = rss_mib(operator.pid, "VmHWM")
    finally:
        operator.terminate()
        operator.wait(timeout=30)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
