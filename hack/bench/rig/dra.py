#!/usr/bin/env python3
"""Placement with and without DRA on superpod-2k (2,048 kwok nodes x 8 GPUs), same run. Prints JSON.

Both halves are the operator benchmark's burst (hack/bench/rig/operator.py: 200 gangs of 1-16 x 8 GPUs,
1,240 pods) on a fresh rig: first with the device plugin (no ResourceSlices), then with the rig's
slices published (hack/dra_slices.py), where every pod gets a ResourceClaim that kube-scheduler must
allocate. Reported per mode: create-to-all-bound, pods bound per second, API requests per pod (by verb
and resource) and CPU seconds per component; then the DRA/device-plugin ratios, and a check that
every allocated claim holds exactly the GPUs its pod names (and no GPU is held twice).
Restarts the local rig (twice).
"""

from __future__ import annotations

import json
import os
from collections import Counter

import bench.rig.operator as ops
import dra_slices
from bench.common import after_gc_discovery, arguments, wait
from railyard.topology.cluster.dra_devices import allocated, device_index, inventory


def run(dra: bool) -> dict:
    _, api = ops.start_rig()
    if dra:
        dra_slices.publish(dra_slices.cluster.KWOK_LABEL)
    crds_applied = ops.apply_crds()
    operator, port, log_path = ops.start_operator("bench-dra" if dra else "bench-plugin")
    try:
        wait(lambda: b"became leader" in log_path.read_bytes(), 60, "leader")
        wait(lambda: ops.gauge(ops.scrape(port), "railyard_state_synced") == 1, 60, "state synced")
        after_gc_discovery(crds_applied)
        figures = ops.burst(api, ops.JOBS, ops.training_job, {"railyard-operator": operator.pid})
        listed = api.list_all(f"/api/v1/namespaces/{ops.NS}/pods")
        pods = [p for p in listed if p["spec"].get("nodeName")]
        figures["pods_listed"], figures["pods_unbound"] = len(listed), len(listed) - len(pods)
        if dra:
            figures["allocation_check"] = check_allocations(api, pods)
        held = Counter((p["spec"]["nodeName"], g) for p in pods
                       for g in p["metadata"]["annotations"]["railyard.dev/gpus"].split(","))
        figures["double_booked_gpus"] = sum(1 for v in held.values() if v > 1)
    finally:
        operator.stop(timeout=30)
    return figures


def check_allocations(api, pods: list[dict]) -> dict:
    """Every pod's claim, allocated, holding exactly its pod's GPUs (from the slices' indices)."""
    where = device_index(inventory(api.list_all("/apis/resource.k8s.io/v1/resourceslices")))
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c
              for c in api.list_all("/apis/resource.k8s.io/v1/resourceclaims")}
    mismatched = 0
    for pod in pods:
        meta = pod["metadata"]
        claim = claims.get((meta["namespace"], meta["name"]))
        got = sorted(index for k in allocated(claim or {}) if (index := where.get(k, ("", None))[1]) is not None)
        want = sorted(int(g) for g in meta["annotations"]["railyard.dev/gpus"].split(","))
        mismatched += got != want
    return {"pods": len(pods), "claims": len(claims), "mismatched": mismatched}


def main() -> None:
    arguments(__doc__)
    figures: dict = {"machine": {"cpus": os.cpu_count()}, "pods": sum(ops.BURST.values())}
    if os.environ.get("BENCH_DRA_ONLY"):  # a quick look at the DRA half alone
        print(json.dumps({**figures, "dra": run(dra=True)}, indent=2))
        return
    figures["device_plugin"] = run(dra=False)
    ops.progress(figures)
    figures["dra"] = run(dra=True)
    plugin, dra = figures["device_plugin"], figures["dra"]
    figures["ratio_dra_to_device_plugin"] = {
        "all_bound_seconds": round(dra["all_bound_seconds"] / plugin["all_bound_seconds"], 3),
        "api_requests_per_pod": round(dra["api_requests_per_pod"]["total"] / plugin["api_requests_per_pod"]["total"],
                                      3),
        "operator_cpu_seconds": round(dra["cpu_seconds"]["railyard-operator"] /
                                      plugin["cpu_seconds"]["railyard-operator"], 3),
        "kube_scheduler_cpu_seconds": round(dra["cpu_seconds"]["kube-scheduler"] /
                                            plugin["cpu_seconds"]["kube-scheduler"], 3),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
