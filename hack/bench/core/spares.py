#!/usr/bin/env python3
"""Hot-spares benchmark (issue 24, 5c) on the superpod-2k topology (2,048 nodes x 8 GPUs, TORs of 32
nodes), on the pure core: the recovery benchmark's workload, gangs of 128 whole-node replicas filling
the cluster, then a sequence of node failures (each failed node stays out for the next 8 failures: a
repair takes a day at one failure every 3 hours), each answered the way the operator answers it
(`solve_replacement`, the lost rank next to where it was). With RAILYARD_SPARES_PER_TOR=0 and =1
(first placements leave each TOR's spare, decide/spares.py), on the same failures. Prints JSON: the
share of replacements in the lost node's TOR, how many found none, the replacement solve time, and the
GPUs the spares keep idle.

The time from signal to the new generation released on a live control plane, with a spare, is measured by
tests/e2e/test_spares.py.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from bench.common import emit, superpod_snapshot
from railyard.operator.decide.spares import spare_nodes
from railyard.topology.replace import RankSlot, solve_replacement
from railyard.topology.request import GangRequest
from railyard.topology.solver import solve

REPAIR_AFTER = 8  # failures before a failed node is back


def run(spares: int, failures: int, seed: int) -> dict:
    snapshot = superpod_snapshot()
    models = {n.name: n for n in snapshot.nodes}
    gangs: dict[str, list[RankSlot]] = {}
    while True:
        request = GangRequest(f"g{len(gangs)}", 128, 8, namespace="bench")
        view = snapshot.without_nodes(spare_nodes(snapshot, spares))
        decision = solve(view, request)
        if decision.placement is None:
            break
        snapshot = snapshot.allocate(decision.placement.allocations)
        gangs[request.name] = [RankSlot(r.rank, r.node, r.gpus) for r in decision.placement.replicas]
    idle = sum(len(snapshot.free(n)) for n in snapshot.nodes)
    rng = random.Random(seed)
    down: list[str] = []
    same = none = 0
    seconds: list[float] = []
    for _ in range(failures):
        name = rng.choice(sorted(gangs))
        slots = gangs[name]
        victim = rng.choice(slots)
        keep = [s for s in slots if s.node != victim.node]
        lost = [s for s in slots if s.node == victim.node]
        down.append(victim.node)
        view = snapshot.without_nodes(frozenset(down))
        started = time.perf_counter()
        decision = solve_replacement(view, GangRequest(name, 128, 8, namespace="bench"), keep, lost,
                                     {victim.node: models[victim.node]})
        seconds.append(time.perf_counter() - started)
        snapshot = snapshot.release([(s.node, s.gpus) for s in lost])
        if not decision.found:
            none += 1  # the gang would wait for a node (or re-queue); the rank stays where it was here
        else:
            same += sum(r.same_tor for r in decision.replacements)
            snapshot = snapshot.allocate([(r.new, r.gpus) for r in decision.replacements])
            moved = {r.rank: RankSlot(r.rank, r.new, r.gpus) for r in decision.replacements}
            gangs[name] = [moved.get(s.rank, s) for s in slots]
        if len(down) > REPAIR_AFTER:
            down.pop(0)  # repaired: free again (its GPUs were released when it failed)
    return {
        "spares_per_tor": spares, "gangs": len(gangs), "gpus_placed": 8 * 128 * len(gangs),
        "gpus_idle_after_placement": idle, "failures": failures,
        "same_tor_share": round(same / max(1, failures - none), 3), "no_replacement": none,
        "replacement_solve_ms_p50": round(statistics.median(seconds) * 1000, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    without, with_ = run(0, args.failures, args.seed), run(1, args.failures, args.seed)
    summary = {"workload": "superpod-2k filled with 128 x 8 gangs (no required tier), node failures one after "
                           f"another, each node back after {REPAIR_AFTER} more", "without": without,
               "with_one_spare_per_tor": with_}
    emit(summary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
