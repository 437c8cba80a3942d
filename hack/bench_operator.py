#!/usr/bin/env python3
"""Operator figures on the superpod-2k profile (2,048 kwok nodes): creation -> all 128 pods bound for a
128-replica job; 200 jobs created at once (all placed, zero double-booked GPUs, pods released per
second); operator resident memory. Prints JSON. Restarts the local rig."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_common import HACK, cluster, fresh_cluster, percentile, rss_mib, wait
from railyard.operator.kubeapi import KubeApi
from railyard.topology.api import GROUP, PLURAL, VERSION

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
JOBS = f"/apis/{GROUP}/{VERSION}/namespaces/bench/{PLURAL}"


def job(name: str, replicas: int) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "t", "image": "registry.invalid/t:0", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}


def pods(api: KubeApi, selector: str | None = None) -> list[dict]:
    query = [("labelSelector", selector or "railyard.dev/job-name")]
    return api.request("GET", "/api/v1/namespaces/bench/pods", query=query)["items"]


def main() -> None:
    figures: dict = fresh_cluster("superpod-2k")
    subprocess.run(["kubectl", "--kubeconfig", str(cluster.KUBECONFIG), "apply", "-f", str(HACK.parent / "crds")],
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

        # A 128-replica job: creation -> every pod bound.
        times = []
        for run in range(RUNS):
            name = f"big-{run}"
            t0 = time.monotonic()
            api.request("POST", JOBS, job(name, 128))
            wait(lambda n=name: (p := pods(api, f"railyard.dev/job-name={n}")) and len(p) == 128
                 and all(x["spec"].get("nodeName") for x in p), 120, f"{name} bound", interval=0.05)
            times.append(time.monotonic() - t0)
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

        def released() -> bool:
            items = pods(api)
            return len(items) == total and not any(p["spec"].get("schedulingGates") for p in items)

        wait(released, 600, "all burst pods released", interval=0.2)
        released_at = time.monotonic() - t0
        wait(lambda: all(p["spec"].get("nodeName") for p in pods(api)), 600, "all burst pods bound", interval=0.5)
        bound_at = time.monotonic() - t0
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
        }
        figures["operator_rss_mib_after_burst"] = rss_mib(operator.pid)
        figures["operator_peak_rss_mib"] = rss_mib(operator.pid, "VmHWM")
    finally:
        operator.terminate()
        operator.wait(timeout=30)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
