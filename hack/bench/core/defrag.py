#!/usr/bin/env python3
"""Defragmentation benchmark (make defrag): a stream of gangs arriving and leaving on superpod-2k (2,048 nodes x 8
GPUs) run through the operator's own queue pass (decide/pass_plan.plan_pass, via bench/sim.py: starvation
reservations, room made by moving `migratable` gangs, the moves carried out by decide/restart_plan.plan_restart)
with and without defragmentation, on the same arrivals, with the operator's settings model. Prints JSON: the
large gangs' waiting time (p50, p90), GPU utilisation over time, moves made and the GPU-hours they cost.

The stream: Poisson arrivals; 70 % small gangs (1-8 nodes, one TOR required), 25 % medium (16-32 nodes, one
TOR), 5 % large (128 nodes, one leaf required); exponential lifetimes (small/medium 2 h, large 6 h); small and
medium gangs allow moves. A pass every 5 simulated minutes; a large gang starves after 10 minutes (it then
reserves the nodes it waits for); a mover saves a step within RAILYARD_PREEMPTION_CHECKPOINT_SECONDS, then
restarts off the nodes it leaves, which costs it 10 minutes of its GPUs (the work since its checkpoint, run
again); at most RAILYARD_MIGRATIONS_PER_HOUR moves an hour, a gang moved at most once an hour.

Simulated time, not a live rig: the live mechanics are tests/e2e/test_defrag.py.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import emit, superpod_snapshot
from bench.sim import SimCluster, training_job
from railyard.operator.base.settings import Settings

PASS = 300.0  # seconds between passes
MOVE_COST = 600.0  # seconds of the mover's GPUs a move costs (its work since the checkpoint, run again)
STARVATION = 600.0
SAID = "the operator's queue pass (decide/pass_plan.plan_pass) and restarts (decide/restart_plan.plan_restart)"


@dataclass
class Job:
    name: str
    nodes: int
    tier: str
    arrive: float
    lifetime: float

    @property
    def large(self) -> bool:
        return self.nodes >= 128


def stream(seed: int, hours: float, rate_per_hour: float) -> list[Job]:
    rng = random.Random(seed)
    jobs: list[Job] = []
    t = 0.0
    while t < hours * 3600:
        t += rng.expovariate(rate_per_hour / 3600)
        kind = rng.choices(("small", "medium", "large"), weights=(70, 25, 5))[0]
        if kind == "small":
            nodes, tier, mean = rng.choice((1, 2, 4, 8)), "tor", 7200
        elif kind == "medium":
            nodes, tier, mean = rng.choice((16, 32)), "tor", 7200
        else:
            nodes, tier, mean = 128, "leaf", 21600
        jobs.append(Job(f"j{len(jobs)}", nodes, tier, t, rng.expovariate(1 / mean)))
    return jobs


def simulate(jobs: list[Job], defrag: bool, hours: float) -> dict:
    settings = Settings.of({"RAILYARD_DEFRAGMENTATION": defrag, "RAILYARD_STARVATION_SECONDS": STARVATION,
                            "RAILYARD_MIGRATIONS_PER_HOUR": 4, "RAILYARD_MIGRATION_INTERVAL_SECONDS": 3600})
    sim = SimCluster(superpod_snapshot(), settings, move_seconds=settings.preemption.checkpoint_seconds,
                     restart_cost=MOVE_COST)
    total = sim.snapshot.total_gpus
    pending = sorted(jobs, key=lambda j: j.arrive)
    large: dict[tuple[str, str], Job] = {}
    utilisation: list[float] = []
    now = 0.0
    started = time.perf_counter()
    while now < hours * 3600:
        while pending and pending[0].arrive <= now:
            job = pending.pop(0)
            key = sim.submit(training_job(job.name, job.nodes, 8, required_tier=job.tier, migratable=not job.large),
                             job.lifetime, job.arrive)
            if job.large:
                large[key] = job
        sim.step(now)
        utilisation.append(1 - sim.current.free_gpus / total)
        now += PASS
    counted = {k: j for k, j in large.items() if j.arrive < hours * 3600 * 0.75}  # arrived with time to start
    waits = [sim.waits.get(k, hours * 3600 - j.arrive) for k, j in counted.items()]
    return {
        "large_gangs": len(counted), "large_started": sum(1 for k in counted if k in sim.waits),
        "large_wait_p50_minutes": round(statistics.median(waits) / 60, 1) if waits else None,
        "large_wait_p90_minutes": round(statistics.quantiles(waits, n=10)[-1] / 60, 1) if len(waits) > 1 else None,
        "large_wait_gpu_hours": round(sum(waits) * 8 * 128 / 3600, 1),  # the large gangs' GPUs kept waiting
        "gpu_utilisation_mean": round(statistics.fmean(utilisation), 3),
        "gpu_utilisation_by_hour": [round(statistics.fmean(utilisation[i:i + 12]), 3)
                                    for i in range(0, len(utilisation), 12)],
        "moves": len(sim.moved),
        "move_gpu_hours": round(sum(cost for _, cost in sim.moved) / 3600, 1),
        "sim_seconds": round(time.perf_counter() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--rate", type=float, default=36.0, help="arrivals per hour (about 100 % of the GPUs)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    print(f"defrag: {SAID}, with their settings model, on simulated time", file=sys.stderr)
    runs = []
    for seed in range(1, args.seeds + 1):
        jobs = stream(seed, args.hours, args.rate)
        run: dict = {"seed": seed, "gangs": len(jobs)}
        for defrag in (False, True):
            run["with_defrag" if defrag else "without"] = simulate(jobs, defrag, args.hours)
        runs.append(run)

    def median(side: str, key: str) -> float:
        return float(statistics.median(r[side][key] or 0 for r in runs))

    keys = ("large_wait_p50_minutes", "large_wait_p90_minutes", "large_wait_gpu_hours", "gpu_utilisation_mean",
            "moves", "move_gpu_hours")
    summary: dict[str, Any] = {
        "workload": f"superpod-2k, {args.rate:.0f} gangs an hour over {args.hours:.0f} h: 70 % 1-8 nodes, 25 % 16-32 "
                    "nodes (TOR required), 5 % 128 nodes (leaf required); simulated passes every 5 min",
        "simulation": SAID,
        "runs": runs,
        "median": {side: {k: median(side, k) for k in keys} for side in ("without", "with_defrag")},
    }
    summary["ratio_large_wait_p90_with_over_without"] = round(
        median("with_defrag", "large_wait_p90_minutes") / max(0.1, median("without", "large_wait_p90_minutes")), 2)
    emit(summary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
