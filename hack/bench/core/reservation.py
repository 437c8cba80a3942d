#!/usr/bin/env python3
"""Starvation-threshold benchmark: the living cluster's stream (operator/bench/living.py: the seeds, size
mix, lognormal lifetimes and 1.1x load of `make compare`'s living part) simulated on the pure core for
several `starvationSeconds` on the same arrivals. Prints JSON per seed and threshold: every job's wait
p50/p99 (ranked as the living harness ranks them, waits after the run's end included), the p99 per size
class, GPUs held averaged from the run's start, and the reservations taken.

The simulation is the pass of operator/act/placing.py on the solver, in 1 s passes, calling the queue's own
rule (operator/decide/queue.py: order, holders first, starving, worth_solving with has_room, reserved_nodes):
jobs in arrival order (one priority), backfill, and one reservation at a time (the default maxReservations)
taken by the starving job whose last reservation ended longest ago, then the oldest, kept for at most
reservationSeconds. Not modelled: preemption, spares, bind failures, the solve budget. Jobs start the pass
they are placed and end exactly at their lifetime: there is no API server, kube-scheduler or kwok, so waits
run below a live rig's (seed 13 at 120 s, against the rig's run r13: every quantile of every size class a
few seconds lower, 32+ replicas p99 140 s against 149). It ranks thresholds; the live runs
(docs/benchmarks.md) measure them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from bench.common import emit, superpod_snapshot
from bench.peers.living import SIZE_CLASSES, living_stream, settled_percentile, size_class
from bench.peers.translators import PeerJob
from railyard.operator.base.objects import Key
from railyard.operator.decide import queue
from railyard.operator.decide.queue import Failure, QueuedJob
from railyard.topology.model import Snapshot
from railyard.topology.request import GangRequest
from railyard.topology.solver import solve

RUN_SECONDS = 600.0  # the living part's COMPARE_LIVING_SECONDS in docs/benchmarks.md
LIFETIME_SECONDS = 150.0  # its COMPARE_LIFETIME_SECONDS
RESERVATION_SECONDS = 600.0  # the operator's default reservationSeconds
RETRY_SECONDS = 30.0  # and retrySeconds
PASS_SECONDS = 1.0


@dataclass
class World:
    snapshot: Snapshot
    queue: list[QueuedJob] = field(default_factory=list)
    running: dict[Key, tuple[float, tuple[tuple[str, tuple[int, ...]], ...]]] = field(default_factory=dict)
    waits: dict[Key, float] = field(default_factory=dict)
    holder: Key | None = None
    reserved_at: float = 0.0
    reservation_ended: dict[Key, float] = field(default_factory=dict)
    reservations: int = 0
    freed: int = 0  # the state's capacity-freed counter
    failures: dict[Key, Failure] = field(default_factory=dict)


def _queued(job: PeerJob) -> QueuedJob:
    request = GangRequest(job.name, job.replicas, job.gpus, namespace="bench", required_tier=job.required_tier,
                          preferred_tier=job.preferred_tier)
    return QueuedJob(("bench", job.name), 0, job.arrival, request)


def _take_reservation(world: World, now: float, starvation: float) -> None:
    """The time box, then the turn: the starving job whose last reservation ended longest ago (placing.py)."""
    if world.holder is not None and now - world.reserved_at > RESERVATION_SECONDS:
        world.reservation_ended[world.holder] = now
        world.holder = None
    if world.holder is None:
        starving = [j for j in world.queue if queue.starving(j, now, starvation)]
        if starving:
            first = min(starving, key=lambda j: (world.reservation_ended.get(j.key, float("-inf")), j.queued_since))
            world.holder, world.reserved_at = first.key, now
            world.reservations += 1


def _pass(world: World, now: float, starvation: float, lifetimes: dict[Key, float]) -> None:
    _take_reservation(world, now, starvation)
    holders, ordered = queue.holders_first(queue.order(world.queue), lambda key: key == world.holder)
    held = queue.reserved_nodes(holders[0], world.snapshot) if holders else frozenset()
    for job in ordered:
        mine = job.key == world.holder
        if not mine and not queue.worth_solving(world.failures.get(job.key), world.freed, None, now,
                                                RETRY_SECONDS,
                                                partial(queue.has_room, world.snapshot, job.request, held)):
            continue
        decision = solve(world.snapshot if mine else world.snapshot.without_nodes(held), job.request)
        if decision.placement is None:
            world.failures[job.key] = Failure(world.freed, None, now)
            continue
        slots = tuple((node, tuple(gpus)) for node, gpus in decision.placement.allocations)
        world.snapshot = world.snapshot.allocate(slots)
        world.running[job.key] = (now + lifetimes[job.key], slots)
        world.waits[job.key] = now - job.queued_since
        world.queue.remove(job)
        if mine:
            world.holder = None


def simulate(jobs: list[PeerJob], starvation: float, seconds: float) -> dict:
    world = World(superpod_snapshot())
    total = world.snapshot.total_gpus
    pending = sorted((_queued(j) for j in jobs), key=lambda j: j.queued_since)
    lifetimes = {("bench", j.name): j.lifetime or 0.0 for j in jobs}
    held_gpu_seconds = 0.0
    now = 0.0
    while now < seconds or (world.queue and now < 3 * seconds):
        for key in [k for k, (ends, _) in world.running.items() if ends <= now]:
            world.snapshot = world.snapshot.release(world.running.pop(key)[1])
            world.freed += 1
        while pending and pending[0].queued_since <= now:
            world.queue.append(pending.pop(0))
        _pass(world, now, starvation, lifetimes)
        if now < seconds:
            held_gpu_seconds += (total - world.snapshot.free_gpus) * PASS_SECONDS
        now += PASS_SECONDS
    classes = {("bench", j.name): size_class(j) for j in jobs}
    waiting = {j.key: now - j.queued_since for j in world.queue}

    def p(q: float, size: str | None = None) -> float | None:
        return settled_percentile([w for k, w in world.waits.items() if size in (None, classes[k])],
                                  [w for k, w in waiting.items() if size in (None, classes[k])], q)

    return {"wait_p50_seconds": p(50), "wait_p99_seconds": p(99),
            "wait_p99_by_size_seconds": {name: p(99, name) for name, _, _ in SIZE_CLASSES},
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
