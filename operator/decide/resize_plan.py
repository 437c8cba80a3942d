"""Resizing a running elastic gang whose size differs from spec.replicas, decided: a shrink drops replicas from
the least dense domain; a grow is a delta solve next to the job (current ranks keep their nodes, never onto
nodes held for another gang); growing back by itself (after a shrink) waits its cooldown and grows by at least
minGrowth (decide/policy.grow_rule), and after finding no room waits until capacity is freed or the retry
period ends. Pure: act/resize.py carries the answer out (checkpoint first, then a new attempt)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import RestartReason
from railyard.operator.decide.actions import Resize
from railyard.operator.decide.policy import grow_rule
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.solver.elastic import choose_shrink, largest_valid, solve_growth, valid_size
from railyard.topology.solver.replace import RankSlot


class ResizeKind(enum.Enum):
    RESIZE = "resize"  # a new attempt of `replicas`
    NONE = "none"  # nothing to do now (a node unknown, the cooldown, nothing freed since the last try)
    NO_ROOM = "no-room"  # a grow found no room next to the job (BelowDesired says so)


@dataclass(frozen=True)
class ResizePlan:
    kind: ResizeKind
    replicas: tuple[tuple[GpuNode, tuple[int, ...]], ...] = ()
    moved: int = 0  # ranks that changed their number
    reason: RestartReason | None = None
    message: str = ""


@dataclass(frozen=True)
class GrowAttempt:
    """A grow found no room: nothing is tried again until capacity is freed or the retry period ends."""

    freed: int  # the state's capacity-freed counter then
    at: float  # monotonic seconds


def growth_avoids(job: Job, held: frozenset[str], reserved: Mapping[Key, frozenset[str]],
                  spares: frozenset[str]) -> frozenset[str]:
    """Nodes a gang may not grow onto: held for another gang (preemption, a move, a replacement), reserved by
    another starving gang, and the hot spares unless it backfills them (as its first placement could not)."""
    others = frozenset().union(*(nodes for key, nodes in reserved.items() if key != job.key))
    backfills = job.spec is not None and job.spec.preemption.backfill_spares
    return held | others | (frozenset() if backfills else spares)


def plan_resize(job: Job, action: Resize, snapshot: Snapshot, models: Mapping[str, GpuNode],
                held: frozenset[str], last_try: GrowAttempt | None, freed: int, mono: float, now: float,
                attempt_began: float, retry_seconds: float) -> ResizePlan:
    spec, placement = job.spec, job.placement
    assert spec is not None and placement is not None
    ranks = sorted(placement.ranks, key=lambda r: r.rank)
    current, desired = len(ranks), spec.replicas
    slots = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks]
    if any(s.node not in models for s in slots):
        return ResizePlan(ResizeKind.NONE)  # a node of the gang is unknown: the fault path comes first
    if any(not snapshot.has_node(s.node) for s in slots):
        # A rank sits on a node new pods cannot be bound to (cordoned, draining): a resize would restart the
        # gang with a pod pinned there. It resizes once that node is usable again, or the gang has moved.
        return ResizePlan(ResizeKind.NONE)
    user = (placement.desired_replicas or current) != desired  # kubectl scale / an edit
    if desired < current:
        size = largest_valid(desired, 1, spec.gpus_per_replica, spec.parallelism) or desired
        kept = choose_shrink(slots, models, current - size)
        replicas = tuple((models[s.node], s.gpus) for s in kept)
        moved = sum(1 for i, s in enumerate(kept) if s.rank != i)
    else:
        rule = grow_rule(user, now - attempt_began, spec.elastic_policy)
        if not rule.allowed:
            return ResizePlan(ResizeKind.NONE)
        if last_try is not None and last_try.freed == freed and mono - last_try.at < retry_seconds:
            return ResizePlan(ResizeKind.NONE)  # nothing was freed since the last try found no room
        grown = None
        for size in range(desired, len(slots), -1):
            if size - len(slots) < rule.min_growth:
                break
            if not valid_size(size, spec.gpus_per_replica, spec.parallelism):
                continue
            decision = solve_growth(snapshot, action.request, list(slots), size - len(slots), avoid=held)
            if decision.found:
                grown = list(decision.replacements)
                break
        if grown is None:
            return ResizePlan(ResizeKind.NO_ROOM, message=f"{current} of {desired} replicas: no room to grow next "
                                                          "to the job")
        replicas = tuple((models[s.node], s.gpus) for s in slots) + tuple((snapshot.node(r.new), r.gpus)
                                                                         for r in grown)
        moved = 0
    if len(replicas) == current:
        return ResizePlan(ResizeKind.NONE)
    restart_count = job.restart_count + 1
    reason = RestartReason.SCALE_UP if len(replicas) > current else RestartReason.SCALE_DOWN
    return ResizePlan(ResizeKind.RESIZE, replicas, moved, reason,
                      f"restart {restart_count}: resized from {current} to {len(replicas)} replicas ({reason})")
