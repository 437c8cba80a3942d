#!/usr/bin/env python3
"""Recovery benchmark on superpod-2k (2,048 kwok nodes x 8 GPUs). Prints JSON.

For gangs of 128 and 1,024 whole-node replicas, one and eight of their nodes are lost (an untolerated
NoExecute taint: the signal arrives at once, so the figure is Railyard's own reaction, not the
node-lifecycle controller's grace period). Measured: signal -> every rank of the new generation
released (and bound); the replacement solve time (operator histogram); API writes per recovery
(apiserver_request_total deltas); healthy ranks moved; replacements in the lost node's TOR.
Restarts the local rig.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable

from bench.common import arguments, wait
from bench.rig.operator import (
    JOBS,
    NS,
    PodWatch,
    api_requests,
    gauge,
    rig_with_operator,
    scrape,
    settled,
    training_job,
)
from railyard.operator.kube.client import KubeApi
from railyard.topology.cluster.labels import LABEL_JOB
from railyard.topology.cluster.pod_trust import pod_name

CASES = [(128, 1), (128, 8), (1024, 1), (1024, 8)]
FAULT = {"key": "nvidia.com/gpu-xid-error", "value": "79", "effect": "NoExecute"}


def writes(counts) -> int:
    return sum(v for k, v in counts.items() if k.split()[0] in ("POST", "PUT", "PATCH", "DELETE"))


def set_taint(api: KubeApi, node: str, on: bool) -> None:
    current = api.request("GET", f"/api/v1/nodes/{node}")
    taints = [t for t in (current.get("spec") or {}).get("taints") or []
              if t.get("key") not in (FAULT["key"], "railyard.dev/unhealthy")]
    if on:
        taints.append(FAULT)
    api.request("PATCH", f"/api/v1/nodes/{node}", {"spec": {"taints": taints or None}},
                "application/merge-patch+json")


def next_attempt_pods(api: KubeApi, name: str, restart_count: int, timeout: float = 600) -> list[str]:
    """The pods of attempt `restart_count` by rank, once its placement is written: new pods for a Recreate restart,
    the kept pods and the lost ranks' new ones for an InPlace one."""
    def placement() -> dict | None:
        status = api.request("GET", f"{JOBS}/{name}").get("status") or {}
        return status.get("placement") if (status.get("restartCount") or 0) >= restart_count else None

    placed = wait(placement, timeout, f"{name} restarted", interval=0.1)
    return [r.get("pod") or pod_name(name, r["rank"], placed.get("serial") or 0)
            for r in sorted(placed["ranks"], key=lambda r: r["rank"])]


def lose_nodes_and_recover(api: KubeApi, watch: PodWatch, name: str, replicas: int, lost_count: int,
                           bound_timeout: float = 600, before_signal: Callable[[], None] | None = None) -> dict:
    """Taint `lost_count` nodes of the bound job `name` (spread over its ranks) and measure until every
    rank of its next attempt is released and bound (`before_signal` runs first, inside the measured time: an
    operator started then). The taints stay: the caller lifts them (set_taint).
    Past `bound_timeout` the figures say how far it got (ranks bound, the old attempt's pods still
    terminating: their GPUs are what the new ranks wait for) instead of raising."""
    job = api.request("GET", f"{JOBS}/{name}")
    ranks = sorted(job["status"]["placement"]["ranks"], key=lambda r: r["rank"])
    before = {r["rank"]: r["node"] for r in ranks}
    step = max(1, len(ranks) // lost_count)
    victims = sorted({ranks[i * step]["node"] for i in range(lost_count)})
    counts = api_requests(api)
    t0 = time.monotonic()
    if before_signal is not None:
        before_signal()
    for node in victims:
        set_taint(api, node, True)
    new = next_attempt_pods(api, name, (job["status"].get("restartCount") or 0) + 1)
    wait(lambda: all(p in watch.released for p in new), 600, f"{name} released again", interval=0.1)
    released = max(watch.released[p] for p in new) - t0
    try:
        wait(lambda: all(p in watch.bound for p in new), bound_timeout, f"{name} bound again", interval=0.1)
        bound: float | None = max(watch.bound[p] for p in new) - t0
    except TimeoutError:
        bound = None
    old_attempt = [p for p in api.list_all(f"/api/v1/namespaces/{NS}/pods", [("labelSelector", f"{LABEL_JOB}={name}")])
                   if p["metadata"]["name"] not in new]
    writes_used = writes(api_requests(api)) - writes(counts)
    job = api.request("GET", f"{JOBS}/{name}")
    after = {r["rank"]: r["node"] for r in job["status"]["placement"]["ranks"]}
    replacements = job["status"]["lastRestart"]["replacements"]
    return {
        "replicas": replicas, "lost_nodes": len(victims), "victims": victims,
        "signal_to_all_released_seconds": round(released, 2),
        "signal_to_all_bound_seconds": round(bound, 2) if bound is not None else None,
        "ranks_bound_at_the_end": sum(1 for p in new if p in watch.bound),
        "old_attempt_pods_left_at_the_end": len(old_attempt),
        "api_writes": writes_used,
        "healthy_ranks_moved": sum(1 for r, n in before.items() if n not in victims and after[r] != n),
        "replacements_same_tor": sum(1 for r in replacements if r["sameTor"]),
        "replacements": len(replacements),
        "pods_kept": sum(1 for p in new if p in watch.bound and watch.bound[p] < t0),
    }


def main() -> None:
    arguments(__doc__)
    api, operator, port = rig_with_operator("bench-recovery")
    results = []
    try:
        for replicas, lost_count in CASES:
            name = f"r{replicas}-l{lost_count}"
            body = training_job(name, replicas)
            # The default 30 s grace: the taint is the signal measured; with 0, heartbeat lag on a saturated
            # 2-core rig (2,048 kwok nodes) made other nodes count as lost too (seen: 12 NotReady "losses").
            watch = PodWatch()
            api.request("POST", JOBS, body)
            wait(lambda n=name, r=replicas, w=watch: sum(1 for p in w.bound if p.startswith(f"{n}-")
                                                         and ".p1-" not in p) >= r, 300, f"{name} bound", interval=0.2)
            results.append(lose_nodes_and_recover(api, watch, name, replicas, lost_count))
            print(json.dumps(results[-1]), flush=True)
            watch.stop()
            api.request("DELETE", f"{JOBS}/{name}")
            for node in results[-1]["victims"]:
                set_taint(api, node, False)
            wait(lambda: not api.list_all(f"/api/v1/namespaces/{NS}/pods"), 600, "pods gone", interval=1)
            wait(lambda: settled(api), 120, "nodes settled", interval=1)
        text = scrape(port)
        solve = {le: float(v) for le, v in
                 re.findall(r'^railyard_replacement_solve_seconds_bucket{le="([^"]+)"} (\S+)$', text, re.M)}
        count = gauge(text, "railyard_replacement_solve_seconds_count")
        total = gauge(text, "railyard_replacement_solve_seconds_sum")
    finally:
        operator.stop(timeout=30)
    print(json.dumps({"cases": results, "replacement_solve_seconds": {
        "count": count, "mean": round(total / count, 4) if count else None, "buckets": solve},
        "machine": {"cpus": os.cpu_count()}}, indent=2))


if __name__ == "__main__":
    main()
