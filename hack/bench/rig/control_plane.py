#!/usr/bin/env python3
"""Control-plane figures: warm `up`, creating the 2,048-node profile, and kube-apiserver / etcd memory
with 2,048 nodes and 20,000 pods (BENCH_CONTROL_PLANE_PODS). Prints JSON. Restarts the local rig (its state is
disposable)."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import arguments, cluster, fresh_cluster, rss_mib, wait
from railyard.operator.kube.client import KubeApi

PODS = int(os.environ.get("BENCH_CONTROL_PLANE_PODS", "20000"))


def main() -> None:
    arguments(__doc__)
    figures: dict[str, Any] = dict(fresh_cluster("superpod-2k"))
    pids = cluster.running()
    figures["idle_with_nodes_rss_mib"] = {c: rss_mib(pids[c]) for c in ("kube-apiserver", "etcd")}
    api = KubeApi(workers=32)
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
    nodes = [n["metadata"]["name"] for n in api.request("GET", "/api/v1/nodes")["items"]]

    def create(i: int) -> None:
        body = {"metadata": {"name": f"p-{i}", "namespace": "bench",
                             "annotations": {"railyard.dev/gpus": str(i % 8)}},
                "spec": {"nodeName": nodes[i % len(nodes)],
                         "containers": [{"name": "c", "image": "registry.invalid/x:0",
                                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        for attempt in range(5):
            try:
                api.request("POST", "/api/v1/namespaces/bench/pods", body)
                return
            except Exception:
                if attempt == 4:
                    raise
                time.sleep(0.5)

    t0 = time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(create, range(PODS)))
    figures[f"create_{PODS}_pods_seconds"] = round(time.monotonic() - t0, 1)

    def running() -> bool:
        # Count page by page: with a field selector the API server reports no remainingItemCount.
        count, token = 0, ""
        while True:
            query = [("limit", "5000")] + ([("continue", token)] if token else [])
            page = api.request("GET", "/api/v1/namespaces/bench/pods", query=query)
            count += sum(1 for p in page["items"] if (p.get("status") or {}).get("phase") == "Running")
            token = page["metadata"].get("continue", "")
            if not token:
                return count >= PODS

    wait(running, 600, "all pods Running", interval=2)
    figures[f"{PODS}_pods_running_seconds"] = round(time.monotonic() - t0, 1)
    figures[f"with_{PODS}_pods_rss_mib"] = {c: rss_mib(pids[c]) for c in ("kube-apiserver", "etcd")}
    figures["peak_rss_mib"] = {c: rss_mib(pids[c], "VmHWM") for c in ("kube-apiserver", "etcd", "kwok")}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
