#!/usr/bin/env python3
"""Force-fit benchmark (issue 24, 5a), on the superpod-2k topology (2,048 nodes x 8 GPUs; a leaf is 4
TORs x 32 nodes): the cluster full of low-priority gangs that checkpoint every 30 minutes, then a
high-priority 128 x 8 gang requiring one leaf. Railyard's victim choice (topology/solver/victims.py) against
a naive policy, "evict the youngest gangs until it fits", on the same clusters. Prints JSON: per seed
and the medians, victims, GPU-hours lost (GPUs x time since each victim's last checkpoint) and the
planning time, with the time of one placement of the same gang on the emptied cluster as the
same-run baseline.

Pure (no rig): the time to release on a live control plane is measured by tests/e2e/test_preemption.py.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import emit, superpod_snapshot
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.victims import RunningGang, plan_preemption

CHECKPOINT_SECONDS = 1800.0
SIZES = (1, 2, 4, 8, 16, 32)  # nodes per gang (8 GPUs each), TOR-required up to 32
LOW, MID, ABOVE = 10, 20, 5000  # ABOVE: gangs of a higher priority than the preemptor (never victims)
PREEMPTOR = 1000


@dataclass(frozen=True)
class Gang:
    running: RunningGang
    age: float  # seconds since it started


def fill(seed: int):
    rng = random.Random(seed)
    snapshot = superpod_snapshot()
    gangs: list[Gang] = []
    misses = 0
    while misses < 20:
        size = rng.choice(SIZES)
        request = GangRequest(f"g{len(gangs)}", size, 8, namespace="bench", required_tier="tor")
        decision = solve(snapshot, request)
        if decision.placement is None:
            misses += 1
            continue
        snapshot = snapshot.allocate(decision.placement.allocations)
        age = rng.uniform(600, 7 * 86400)
        since = rng.uniform(0, min(age, CHECKPOINT_SECONDS))
        priority = rng.choices((LOW, MID, ABOVE), weights=(6, 3, 1))[0]
        slots = tuple(decision.placement.allocations)
        gangs.append(Gang(RunningGang(f"bench/{request.name}", priority, slots, 8 * size * since), age))
    return snapshot, gangs


def naive(snapshot, request: GangRequest, gangs: list[Gang]) -> tuple[list[Gang], float]:
    """Evict the youngest lower-priority gangs, one by one, until the gang fits anywhere."""
    started = time.perf_counter()
    chosen: list[Gang] = []
    current = snapshot
    need = request.replicas * request.gpus_per_replica
    leaf_of = {n.name: n.leaf for n in snapshot.nodes}
    for gang in sorted((g for g in gangs if g.running.priority < PREEMPTOR), key=lambda g: g.age):
        chosen.append(gang)
        current = current.release(gang.running.slots)
        free: dict[str, int] = {}
        for node in current.nodes:
            free[leaf_of[node.name]] = free.get(leaf_of[node.name], 0) + len(current.free(node))
        if max(free.values()) >= need and solve(current, request).placed:
            return chosen, time.perf_counter() - started
    return [], time.perf_counter() - started


def run(seed: int) -> dict:
    snapshot, gangs = fill(seed)
    request = GangRequest("urgent", 128, 8, namespace="bench", required_tier="leaf")
    assert not solve(snapshot, request).placed, "the cluster is full: the gang must not fit as it is"
    started = time.perf_counter()
    solve(snapshot.emptied(), request)  # the baseline: one placement of the gang on an empty cluster
    solve_seconds = time.perf_counter() - started
    candidates = [g.running for g in gangs if g.running.priority < PREEMPTOR]
    started = time.perf_counter()
    plan = plan_preemption(snapshot, request, candidates)
    plan_seconds = time.perf_counter() - started
    youngest, naive_seconds = naive(snapshot, request, gangs)
    by_key = {g.running.key: g for g in gangs}
    out = {
        "seed": seed, "gangs": len(gangs), "gpus_used": sum(g.running.gpus for g in gangs),
        "empty_solve_ms": round(solve_seconds * 1000, 1),
        "railyard": None if plan is None else {
            "victims": len(plan.victims), "victim_gpus": sum(v.gpus for v in plan.victims),
            "lost_gpu_hours": round(plan.lost_gpu_hours, 1), "domain": f"{plan.level} {plan.domain}",
            "max_victim_priority": max(v.priority for v in plan.victims),
            "plan_ms": round(plan_seconds * 1000, 1)},
        "naive_youngest": {
            "victims": len(youngest), "victim_gpus": sum(g.running.gpus for g in youngest),
            "lost_gpu_hours": round(sum(g.running.lost_gpu_seconds for g in youngest) / 3600, 1),
            "leaves_touched": len({snapshot.node(n).leaf for g in youngest for n, _ in g.running.slots}),
            "plan_ms": round(naive_seconds * 1000, 1)},
    }
    if plan is not None:
        assert all(by_key[v.key].running.priority < PREEMPTOR for v in plan.victims)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    runs = [run(seed) for seed in range(1, args.seeds + 1)]
    placed = [r for r in runs if r["railyard"] is not None]

    def median(side: str, field: str) -> float:
        return statistics.median(r[side][field] for r in placed)

    summary = {
        "workload": "superpod-2k full of TOR-required gangs of 1-32 nodes (priority 10/20, 10 % at 5000), "
                    "checkpoint every 30 min; preemptor 128 x 8 requiredTier leaf, priority 1000",
        "runs": runs,
        "median": {side: {f: median(side, f) for f in ("victims", "victim_gpus", "lost_gpu_hours", "plan_ms")}
                   for side in ("railyard", "naive_youngest")},
        "ratio_lost_gpu_hours_naive_over_railyard": round(
            median("naive_youngest", "lost_gpu_hours") / max(0.1, median("railyard", "lost_gpu_hours")), 2),
        "ratio_plan_over_one_empty_solve": round(median("railyard", "plan_ms") /
                                           max(0.1, statistics.median(r["empty_solve_ms"] for r in placed)), 1),
    }
    emit(summary, args.out)
    return 0 if len(placed) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
