#!/usr/bin/env python3
"""Starvation-threshold benchmark: the living cluster's stream (operator/bench/living.py: the seeds, size
mix, lognormal lifetimes and 1.1x load of `make compare`'s living part) simulated on the pure core for
several `starvationSeconds` on the same arrivals. Prints JSON per seed and threshold: every job's wait
p50/p99 (ranked as the living harness ranks them, waits after the run's end included), the p99 per size
class, GPUs held averaged from the run's start, and the reservations taken.

The simulation is the queue rule of operator/act/placing.py on the solver, in 1 s passes: jobs in arrival
order (one priority), backfill, and one reservation at a time (the default maxReservations) taken by the
starving job whose last reservation ended longest ago, then the oldest, on the nodes topology/reservation.py
chooses, kept for at most reservationSeconds. Jobs start the pass they are placed and end exactly at their
lifetime: there is no API server, kube-scheduler or kwok, so waits run below a live rig's (seed 13 at 120 s,
against the rig's run r13: every quantile of every size class a few seconds lower, 32+ replicas p99 140 s
against 149). It ranks thresholds; the live runs (docs/benchmarks.md) measure them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import emit, superpod_snapshot
from railyard.operator.bench.living import SIZE_CLASSES, living_stream, settled_percentile, size_class
from railyard.operator.bench.peers import PeerJob
from railyard.topology.model import Snapshot
from railyard.topology.request import GangRequest
from railyard.topology.reservation import reserved_nodes
from railyard.topology.solver import solve

RUN_SECONDS = 600.0  # the living part's COMPARE_LIVING_SECONDS in docs/benchmarks.md
LIFETIME_SECONDS = 150.0  # its COMPARE_LIFETIME_SECONDS
RESERVATION_SECONDS = 600.0  # the operator's default reservationSeconds
PASS_SECONDS = 1.0


@dataclass
class World:
    snapshot: Snapshot
    queue: list[PeerJob] = field(default_factory=list)
    running: dict[str, tuple[float, tuple[tuple[str, tuple[int, ...]], ...]]] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)
    holder: str | None = None
    reserved_at: float = 0.0
    reservation_ended: dict[str, float] = field(default_factory=dict)
    reservations: int = 0
    freed: int = 0  # capacity freed so far: a job that did not fit is solved again only after more is freed
    failed_at: dict[str, int] = field(default_factory=dict)


def _request(job: PeerJob) -> GangRequest:
    return GangRequest(job.name, job.replicas, job.gpus, namespace="bench", required_tier=job.required_tier,
                       preferred_tier=job.preferred_tier)


def _take_reservation(world: World, now: float, starvation: float) -> None:
    if world.holder is not None and now - world.reserved_at > RESERVATION_SECONDS:
        world.reservation_ended[world.holder] = now
        world.holder = None
    if world.holder is None:
        starving = [j for j in world.queue if now - j.arrival > starvation]
        if starving:
            first = min(starving, key=lambda j: (world.reservation_ended.get(j.name, float("-inf")), j.arrival))
            world.holder, world.reserved_at = first.name, now
            world.reservations += 1


def _pass(world: World, now: float, starvation: float) -> None:
    _take_reservation(world, now, starvation)
    held: frozenset[str] = frozenset()
    holder = next((j for j in world.queue if j.name == world.holder), None)
    if holder is not None:
        held = reserved_nodes(world.snapshot, _request(holder))
    for job in ([holder] if holder is not None else []) + [j for j in world.queue if j is not holder]:
        request = _request(job)
        mine = job is holder
        if not mine and (world.failed_at.get(job.name) == world.freed
                         or world.snapshot.replica_slots(job.gpus, held) < request.smallest):
            continue
        decision = solve(world.snapshot if mine else world.snapshot.without_nodes(held), request)
        if decision.placement is None:
            world.failed_at[job.name] = world.freed
            continue
        slots = tuple((node, tuple(gpus)) for node, gpus in decision.placement.allocations)
        world.snapshot = world.snapshot.allocate(slots)
        world.running[job.name] = (now + (job.lifetime or 0.0), slots)
        world.waits[job.name] = now - job.arrival
        world.queue.remove(job)
        if mine:
            world.holder = None


def simulate(jobs: list[PeerJob], starvation: float, seconds: float) -> dict:
    world = World(superpod_snapshot())
    total = world.snapshot.total_gpus
    pending = sorted(jobs, key=lambda j: j.arrival)
    held_gpu_seconds = 0.0
    now = 0.0
    while now < seconds or (world.queue and now < 3 * seconds):
        for name in [n for n, (ends, _) in world.running.items() if ends <= now]:
            world.snapshot = world.snapshot.release(world.running.pop(name)[1])
            world.freed += 1
        while pending and pending[0].arrival <= now:
            world.queue.append(pending.pop(0))
        _pass(world, now, starvation)
        if now < seconds:
            held_gpu_seconds += (total - world.snapshot.free_gpus) * PASS_SECONDS
        now += PASS_SECONDS
    unplaced = [now - j.arrival for j in world.queue]
    by_name = {j.name: j for j in jobs}
    by_class = {name: settled_percentile([w for n, w in world.waits.items() if size_class(by_name[n]) == name],
                                         [now - j.arrival for j in world.queue if size_class(j) == name], 99)
                for name, _, _ in SIZE_CLASSES}
    waits = list(world.waits.values())
    return {"wait_p50_seconds": settled_percentile(waits, unplaced, 50),
            "wait_p99_seconds": settled_percentile(waits, unplaced, 99),
            "wait_p99_by_size_seconds": by_class,
            "gpu_utilisation_held_from_start": round(held_gpu_seconds / seconds / total, 4),
            "reservations": world.reservations, "unplaced_at_cap": len(world.queue)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="11-23", help="a range a-b or a list a,b,c")
    parser.add_argument("--thresholds", default="60,90,120", help="starvationSeconds to compare")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if "-" in args.seeds:
        low, high = (int(x) for x in args.seeds.split("-"))
        seeds = list(range(low, high + 1))
    else:
        seeds = [int(x) for x in args.seeds.split(",")]
    thresholds = [float(x) for x in args.thresholds.split(",")]
    base = max(thresholds)
    runs = []
    for seed in seeds:
        jobs = living_stream(RUN_SECONDS, seed, superpod_snapshot().total_gpus, 1.1, LIFETIME_SECONDS)
        by = {f"{t:g}": simulate(jobs, t, RUN_SECONDS) for t in thresholds}
        ratios = {k: round((v["wait_p99_seconds"] or 0) / max(0.1, by[f"{base:g}"]["wait_p99_seconds"] or 0), 3)
                  for k, v in by.items()}
        runs.append({"seed": seed, "jobs": len(jobs), "by_starvation_seconds": by,
                     f"wait_p99_over_{base:g}s": ratios})
    emit({"workload": f"living stream on superpod-2k: {RUN_SECONDS:g} s of arrivals at 1.1x the GPUs, mean "
                      f"lifetime {LIFETIME_SECONDS:g} s; simulated 1 s passes", "runs": runs}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
