#!/usr/bin/env python3
"""Elastic resize benchmark on superpod-2k (2,048 kwok nodes x 8 GPUs). Prints JSON.

A 128-replica whole-node job (minReplicas 32, maxReplicas 256) is scaled through the scale subresource
(as `kubectl scale` does): 128 -> 96 -> 160 -> 128. Measured per step: scale -> every pod of the new
generation released and bound; replicas that kept their node; the resize decision time (operator
histogram). Restarts the local rig.
"""

from __future__ import annotations

import json
import os
import time

from bench.common import arguments, wait
from bench.rig.operator import JOBS, PodWatch, gauge, rig_with_operator, scrape, training_job


def main() -> None:
    arguments(__doc__)
    api, operator, port = rig_with_operator("bench-elastic")
    steps = []
    try:
        body = training_job("elastic", 128)
        body["spec"].update(minReplicas=32, maxReplicas=256)
        watch = PodWatch()
        api.request("POST", JOBS, body)
        wait(lambda: sum(1 for p in watch.bound if p.startswith("elastic-")) >= 128, 300, "bound", interval=0.2)
        previous = {r["rank"]: r["node"] for r in api.request("GET", f"{JOBS}/elastic")["status"]["placement"]["ranks"]}
        for generation, size in enumerate((96, 160, 128), start=1):
            t0 = time.monotonic()
            api.request("PATCH", f"{JOBS}/elastic/scale", {"spec": {"replicas": size}}, "application/merge-patch+json")
            pods = [f"elastic.p{generation}-{r}" for r in range(size)]
            wait(lambda p=pods: all(n in watch.released for n in p), 600, f"{size} released", interval=0.1)
            released = max(watch.released[p] for p in pods) - t0
            wait(lambda p=pods: all(n in watch.bound for n in p), 600, f"{size} bound", interval=0.1)
            bound = max(watch.bound[p] for p in pods) - t0
            job = api.request("GET", f"{JOBS}/elastic")
            now = {r["rank"]: r["node"] for r in job["status"]["placement"]["ranks"]}
            kept = len(set(previous.values()) & set(now.values()))
            steps.append({"from": len(previous), "to": size, "scale_to_all_released_seconds": round(released, 2),
                          "scale_to_all_bound_seconds": round(bound, 2), "replicas_that_kept_their_node": kept,
                          "tors": job["status"]["placement"]["tors"]})
            print(json.dumps(steps[-1]), flush=True)
            previous = now
        text = scrape(port)
        count = gauge(text, "railyard_resize_decision_seconds_count")
        total = gauge(text, "railyard_resize_decision_seconds_sum")
        watch.stop()
    finally:
        operator.stop(timeout=30)
    print(json.dumps({"steps": steps, "resize_decision_seconds": {"count": count,
                      "mean": round(total / count, 4) if count else None}, "machine": {"cpus": os.cpu_count()}},
                     indent=2))


if __name__ == "__main__":
    main()
