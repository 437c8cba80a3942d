#!/usr/bin/env python3
"""Hot-spares benchmark (make spares) on the superpod-2k topology (2,048 nodes x 8 GPUs, TORs of 32 nodes): gangs of
128 whole-node replicas filling the cluster through the operator's own queue pass, then a sequence of node
failures (each failed node stays out for the next 8 failures: a repair takes a day at one failure every 3 hours),
each answered by the operator's own restart plan (decide/restart_plan.plan_restart: the lost rank next to where
it was), via bench/sim.py. With RAILYARD_SPARES_PER_TOR=0 and =1 (first placements leave each TOR's spare,
decide/spares.py), on the same failures. Prints JSON: the share of replacements in the lost node's TOR, how many
found none, the time a restart's plan takes, and the GPUs the spares keep idle.

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
from bench.sim import SimCluster, training_job
from railyard.operator.base.settings import Settings
from railyard.operator.decide.restart_plan import RestartKind
from railyard.topology.cluster.faults import LossReason, NodeLoss

REPAIR_AFTER = 8  # failures before a failed node is back
GANGS = 16  # 128 x 8 gangs offered: as many as the cluster holds are placed
SAID = "the operator's queue pass (decide/pass_plan.plan_pass) and restarts (decide/restart_plan.plan_restart)"


def run(spares: int, failures: int, seed: int) -> dict:
    sim = SimCluster(superpod_snapshot(), Settings.of({"RAILYARD_SPARES_PER_TOR": spares}))
    for index in range(GANGS):
        sim.submit(training_job(f"g{index}", 128, 8), lifetime=float("inf"))
    sim.step(0.0)
    gangs = sorted(sim.running)
    idle = sim.current.free_gpus
    rng = random.Random(seed)
    down: list[str] = []
    same = none = 0
    seconds: list[float] = []
    for failure in range(failures):
        key = rng.choice([g for g in gangs if g in sim.running])
        node = rng.choice(sorted({n for n, _ in sim.running[key].slots} - set(down)))
        down.append(node)
        sim.fail(node)
        started = time.perf_counter()
        plan = sim.restart(key, (NodeLoss(node, LossReason.NODE_DELETED, f"failure {failure}", None),),
                           LossReason.NODE_DELETED)
        seconds.append(time.perf_counter() - started)
        if plan.kind is not RestartKind.RESTART:
            none += 1  # re-queued whole (after replacementTimeoutSeconds): placed again when it fits
        else:
            same += sum(1 for r in plan.replacements if r["same_tor"])
        if len(down) > REPAIR_AFTER:
            sim.repair(down.pop(0))  # repaired: usable again
        sim.step(float(failure + 1))  # a gang placed again after having no replacement
    return {
        "spares_per_tor": spares, "gangs": len(gangs), "gpus_placed": 8 * 128 * len(gangs),
        "gpus_idle_after_placement": idle, "failures": failures,
        "same_tor_share": round(same / max(1, failures - none), 3), "no_replacement": none,
        "restart_plan_ms_p50": round(statistics.median(seconds) * 1000, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    print(f"spares: {SAID}, with their settings model", file=sys.stderr)
    without, with_ = run(0, args.failures, args.seed), run(1, args.failures, args.seed)
    summary = {"workload": "superpod-2k filled with 128 x 8 gangs (no required tier), node failures one after "
                           f"another, each node back after {REPAIR_AFTER} more", "without": without,
               "with_one_spare_per_tor": with_, "simulation": SAID}
    emit(summary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
