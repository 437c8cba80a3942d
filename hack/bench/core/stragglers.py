#!/usr/bin/env python3
"""Straggler detection on simulated report streams (pure: no cluster). Prints JSON.

1,024 ranks (128 nodes x 8 ranks, 8 nodes per TOR), one step per simulated second, compute time
1 s x the node's slowdown x uniform noise; scored every 10 simulated seconds, as the operator's flush
does. Measured: simulated seconds from the slowdown's start to a persistent flag (detection), nodes
wrongly flagged, and the real CPU time of one scoring pass (the operator's cost per job per flush).
"""

from __future__ import annotations

import json
import random
import statistics
import time

from bench.common import arguments
from railyard.operator.decide.stragglers import StragglerTracker, score
from railyard.topology.api.job import StragglerPolicy

NODES, PER_NODE, PER_TOR = 128, 8, 8
RANK_NODES = {r: f"n{r // PER_NODE}" for r in range(NODES * PER_NODE)}
TORS = {f"n{i}": f"tor{i // PER_TOR}" for i in range(NODES)}


def run(policy: StragglerPolicy, slow: dict[str, float], noise: float, seconds: int, seed: int,
        every: int = 10) -> dict:
    rng = random.Random(seed)
    samples: dict[int, list[tuple[int, float, float]]] = {r: [] for r in RANK_NODES}
    tracker = StragglerTracker()
    detected, wrong, costs = None, set(), []
    for step in range(seconds):
        for r, n in RANK_NODES.items():
            s = samples[r]
            s.append((step, slow.get(n, 1.0) * rng.uniform(1 - noise, 1 + noise), 1.6))
            if len(s) > policy.window.steps:
                del s[0]
        if step % every:
            continue
        started = time.perf_counter()
        scores = score(samples, RANK_NODES, TORS, policy)
        costs.append(time.perf_counter() - started)
        if scores is None:
            continue
        for f in tracker.observe(scores, float(step), policy):
            if f.persistent:
                if f.node in slow:
                    detected = step if detected is None else detected
                else:
                    wrong.add(f.node)
    return {"detection_seconds": detected, "false_flags": len(wrong),
            "score_ms_p50": round(statistics.median(costs) * 1000, 2), "score_ms_max": round(max(costs) * 1000, 2)}


def main() -> None:
    quick = arguments(__doc__, {"--quick": "a few simulated minutes instead of hours (the smoke test's size)"}).quick
    default = StragglerPolicy()
    tight = StragglerPolicy(threshold=0.85)
    slow_for, noise_for = (90, 120) if quick else (900, 7200)
    results = {
        "ranks": len(RANK_NODES), "nodes": NODES,
        "node_1.5x_slower_default_policy": run(default, {"n17": 1.5}, 0.05, slow_for, seed=1),
        "node_1.25x_slower_threshold_0.85": run(tight, {"n17": 1.25}, 0.05, slow_for, seed=2),
        "noise_only_2h_x3_seeds": [run(default, {}, 0.05, noise_for, seed=s, every=30)["false_flags"]
                                   for s in range(3)],
        "noise_only_2h_threshold_0.85": run(tight, {}, 0.05, noise_for, seed=9, every=30)["false_flags"],
        "policy": {"window_steps": default.window.steps, "warmup_steps": default.warmup_steps,
                   "min_duration_seconds": default.min_duration_seconds},
    }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
