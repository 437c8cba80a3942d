"""Small jobs arriving over simulated time (bench/sim.py): each (GPUs, lifetime, limit over lifetime or None,
arrival second) is submitted as a 1-replica TrainingJob once the simulation reaches its arrival."""

from __future__ import annotations

from bench.sim import SimCluster, training_job

SmallJob = tuple[int, int, float | None, int]


def in_arrival_order(small: list[SmallJob]) -> list[tuple[int, SmallJob]]:
    return sorted(enumerate(small), key=lambda ij: ij[1][3])


def submit_arrived(sim: SimCluster, pending: list[tuple[int, SmallJob]], second: float) -> None:
    """Create the jobs of `pending` (in arrival order) that have arrived by `second`, named small<index>."""
    while pending and pending[0][1][3] <= second:
        i, (gpus, lifetime, factor, arrival) = pending.pop(0)
        limit = int(lifetime * factor) + 1 if factor is not None else None
        sim.submit(training_job(f"small{i}", 1, gpus, time_limit=limit), float(lifetime), float(arrival))
