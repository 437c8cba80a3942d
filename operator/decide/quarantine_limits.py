"""How far Railyard's own actions against nodes may go: the operator's limits, never a tenant's.
Anyone who can create a TrainingJob chooses its stragglerPolicy and reports its own step times, so
a job's policy may only ask for less than these, and a straggler quarantine of a node other jobs
share needs corroboration before the node is taken from them; a quarantine ends at its time, except a
GPU fault's, which lasts while the fault condition is True."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from railyard.operator.base.settings import QuarantineSettings
from railyard.topology.api.timestamps import epoch
from railyard.topology.cluster.faults import NodeHealth

HOUR = 3600.0


@dataclass(frozen=True)
class Limits:
    max_share: float  # of the GPU nodes quarantined at once
    max_nodes: int  # 0: the share alone
    longest_seconds: float
    straggler_per_hour: int  # cluster-wide straggler quarantines
    evictions_per_hour: int  # per job, across its restarts

    @classmethod
    def of(cls, settings: QuarantineSettings) -> Limits:
        return cls(settings.max_share, settings.max_nodes, settings.max_seconds,
                   settings.straggler_quarantines_per_hour, settings.straggler_evictions_per_hour)


def room(quarantined: int, gpu_nodes: int, limits: Limits) -> int:
    """How many more nodes may be quarantined now. At least one node of any cluster may be: a lost
    node is quarantined even on a four-node test cluster."""
    cap = max(1, math.floor(limits.max_share * gpu_nodes))
    if limits.max_nodes:
        cap = min(cap, limits.max_nodes)
    return max(0, cap - quarantined)


def lasting(asked: float | None, default: float, limits: Limits) -> float:
    """How long a quarantine lasts: what the job's policy asks (None: the operator's default), never
    past the longest; 0 (the policy's "until an admin lifts it") gets the longest."""
    seconds = default if asked is None else asked
    return limits.longest_seconds if seconds <= 0 else min(seconds, limits.longest_seconds)


def in_last_hour(times: Iterable[float], now: float) -> list[float]:
    return sorted(t for t in times if now - HOUR < t <= now)


def may_evict(evicted_at: Sequence[float], now: float, asked_per_hour: int, limits: Limits) -> bool:
    """A job is evicted from a slow node at most min(its policy, the operator's) times an hour,
    counted across its restarts (the times are kept in its status)."""
    return len(in_last_hour(evicted_at, now)) < min(asked_per_hour, limits.evictions_per_hour)


def straggler_quarantine_allowed(whole_node: bool, corroborating_jobs: int, recent: int,
                                 limits: Limits) -> str | None:
    """None when a straggler eviction may also quarantine the node; else why not (the job still
    moves off it). A node the job shares with others is taken from them only when another job finds
    it slow too; and at most `straggler_per_hour` such quarantines an hour, cluster-wide."""
    if not whole_node and corroborating_jobs == 0:
        return "the node is shared and no other job finds it slow"
    if recent >= limits.straggler_per_hour:
        return f"{recent} straggler quarantines in the last hour (RAILYARD_STRAGGLER_QUARANTINES_PER_HOUR)"
    return None


def quarantines_over(health: Mapping[str, NodeHealth], now: float) -> list[tuple[str, str]]:
    """The quarantined nodes whose quarantine is over now, with the time it ended: its time passed and no GPU
    fault condition of the node is True (such a quarantine lasts while the fault does)."""
    return [(name, until) for name, h in health.items()
            if (until := h.quarantined_until) and h.quarantined and epoch(until, now) <= now and not h.faults]
