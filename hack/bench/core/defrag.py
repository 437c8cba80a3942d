#!/usr/bin/env python3
"""Defragmentation benchmark (issue 24, 5b): a stream of gangs arriving and leaving on superpod-2k
(2,048 nodes x 8 GPUs), simulated on the pure core (solver, queue rule, migration planner) with and
without defragmentation, on the same arrivals. Prints JSON: the large gangs' waiting time (p50, p90),
GPU utilisation over time, moves made and the GPU-hours they cost.

The stream: Poisson arrivals; 70 % small gangs (1-8 nodes, one TOR required), 25 % medium (16-32
nodes, one TOR), 5 % large (128 nodes, one leaf required); exponential lifetimes (small/medium 2 h,
large 6 h). Every pass (5 simulated minutes) places queued gangs oldest first, with backfill; the
oldest large gang waiting past 10 minutes reserves the leaf with the most free GPUs (the operator's
starvation rule). With defragmentation, a queued gang that fits by free GPUs but not by topology gets
the planner's moves, planned on the same view as its solve (the reservation excluded), among small and
medium gangs not moved in the last hour (RAILYARD_MIGRATION_INTERVAL_SECONDS); each move costs the
mover 10 minutes of its GPUs (checkpoint, restart, reload), at most 4 moves an hour
(RAILYARD_MIGRATIONS_PER_HOUR), and the waiting gang starts one pass later (its movers save a step
and restart first; its wait counts until then).

Simulated time, not a live rig: the live mechanics are tests/e2e/test_defrag.py.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import emit, superpod_snapshot
from railyard.topology.defrag import Mover, plan_migration
from railyard.topology.model import Snapshot
from railyard.topology.preemption import RunningGang
from railyard.topology.request import GangRequest
from railyard.topology.solver import solve

PASS = 300.0  # seconds between passes
MOVE_COST = 600.0  # seconds of the mover's GPUs a move costs
MOVES_PER_HOUR = 4
STARVATION = 600.0


@dataclass
class Job:
    name: str
    nodes: int
    tier: str
    arrive: float
    lifetime: float
    started: float | None = None
    ends: float | None = None
    slots: tuple[tuple[str, tuple[int, ...]], ...] = ()
    moved_at: float | None = None

    @property
    def large(self) -> bool:
        return self.nodes >= 128

    def request(self) -> GangRequest:
        return GangRequest(self.name, self.nodes, 8, namespace="bench", required_tier=self.tier)


@dataclass
class World:
    snapshot: Snapshot
    running: dict[str, Job] = field(default_factory=dict)
    queue: list[Job] = field(default_factory=list)
    moves: list[float] = field(default_factory=list)
    move_gpu_seconds: float = 0.0
    move_count: int = 0


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


def _start(world: World, job: Job, slots, now: float) -> None:
    """Its GPUs taken at once; it starts (and its wait ends) at `now`."""
    job.started, job.ends, job.slots = now, now + job.lifetime, tuple(slots)
    world.snapshot = world.snapshot.allocate(job.slots)
    world.running[job.name] = job


def _defragment(world: World, job: Job, view: Snapshot, now: float) -> bool:
    world.moves = [t for t in world.moves if now - t < 3600]
    if len(world.moves) >= MOVES_PER_HOUR:
        return False
    movers = [Mover(RunningGang(f"bench/{j.name}", 0, j.slots, 8 * j.nodes * MOVE_COST), j.request())
              for j in world.running.values() if not j.large and (j.moved_at is None or now - j.moved_at >= 3600)
              and all(view.has_node(n) for n, _ in j.slots)]
    plan = plan_migration(view, job.request(), movers)
    if plan is None or len(world.moves) + len(plan.moves) > MOVES_PER_HOUR:
        return False
    for move in plan.moves:
        mover = world.running[move.key.split("/")[1]]
        new = {r.rank: (r.new, r.gpus) for r in move.replacements}
        slots = tuple(new.get(rank, slot) for rank, slot in enumerate(mover.slots))
        world.snapshot = world.snapshot.release(mover.slots).allocate(slots)
        mover.slots = slots
        mover.moved_at = now
        mover.ends = (mover.ends or now) + MOVE_COST  # the restart's lost time is run again
        world.move_gpu_seconds += 8 * mover.nodes * MOVE_COST
        world.moves.append(now)
        world.move_count += 1
    _start(world, job, plan.placement.allocations, now + PASS)  # after its movers saved and restarted
    return True


def _reserved(world: World) -> frozenset[str]:
    """The leaf with the most free GPUs, held for a starving large gang."""
    free: dict[str, int] = {}
    for node in world.snapshot.nodes:
        free[node.leaf] = free.get(node.leaf, 0) + len(world.snapshot.free(node))
    leaf = max(free, key=lambda k: (free[k], k))
    return frozenset(n.name for n in world.snapshot.nodes if n.leaf == leaf)


def simulate(jobs: list[Job], defrag: bool, hours: float) -> dict:
    world = World(superpod_snapshot())
    total = world.snapshot.total_gpus
    pending = sorted(jobs, key=lambda j: j.arrive)
    utilisation: list[float] = []
    now = 0.0
    started = time.perf_counter()
    while now < hours * 3600:
        for job in [j for j in world.running.values() if (j.ends or 0) <= now]:
            world.snapshot = world.snapshot.release(job.slots)
            del world.running[job.name]
        while pending and pending[0].arrive <= now:
            world.queue.append(pending.pop(0))
        starving = next((j for j in world.queue if j.large and now - j.arrive > STARVATION), None)
        held = _reserved(world) if starving is not None else frozenset()
        for job in list(world.queue):
            view = world.snapshot if job is starving or not held else world.snapshot.without_nodes(held)
            decision = solve(view, job.request())
            if decision.placement is not None:
                _start(world, job, decision.placement.allocations, now)
                world.queue.remove(job)
            elif defrag and job.large and _defragment(world, job, view, now):
                world.queue.remove(job)
        utilisation.append(1 - world.snapshot.free_gpus / total)
        now += PASS
    large = [j for j in jobs if j.large and j.arrive < hours * 3600 * 0.75]  # arrived with time to start
    waits = [(j.started if j.started is not None else hours * 3600) - j.arrive for j in large]
    return {
        "large_gangs": len(large), "large_started": sum(1 for j in large if j.started is not None),
        "large_wait_p50_minutes": round(statistics.median(waits) / 60, 1) if waits else None,
        "large_wait_p90_minutes": round(statistics.quantiles(waits, n=10)[-1] / 60, 1) if len(waits) > 1 else None,
        "large_wait_gpu_hours": round(sum(waits) * 8 * 128 / 3600, 1),  # the large gangs' GPUs kept waiting
        "gpu_utilisation_mean": round(statistics.fmean(utilisation), 3),
        "gpu_utilisation_by_hour": [round(statistics.fmean(utilisation[i:i + 12]), 3)
                                    for i in range(0, len(utilisation), 12)],
        "moves": world.move_count,
        "move_gpu_hours": round(world.move_gpu_seconds / 3600, 1),
        "sim_seconds": round(time.perf_counter() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--rate", type=float, default=36.0, help="arrivals per hour (about 100 % of the GPUs)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = []
    for seed in range(1, args.seeds + 1):
        jobs = stream(seed, args.hours, args.rate)
        run: dict = {"seed": seed, "gangs": len(jobs)}
        for defrag in (False, True):
            copies = [Job(j.name, j.nodes, j.tier, j.arrive, j.lifetime) for j in jobs]
            run["with_defrag" if defrag else "without"] = simulate(copies, defrag, args.hours)
        runs.append(run)

    def median(side: str, key: str) -> float:
        return statistics.median(r[side][key] or 0 for r in runs)

    keys = ("large_wait_p50_minutes", "large_wait_p90_minutes", "large_wait_gpu_hours", "gpu_utilisation_mean",
            "moves", "move_gpu_hours")
    summary = {
        "workload": f"superpod-2k, {args.rate:.0f} gangs an hour over {args.hours:.0f} h: 70 % 1-8 nodes, 25 % 16-32 "
                    "nodes (TOR required), 5 % 128 nodes (leaf required); simulated passes every 5 min",
        "runs": runs,
        "median": {side: {k: median(side, k) for k in keys} for side in ("without", "with_defrag")},
    }
    summary["ratio_large_wait_p90_with_over_without"] = round(
        median("with_defrag", "large_wait_p90_minutes") / max(0.1, median("without", "large_wait_p90_minutes")), 2)
    emit(summary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
