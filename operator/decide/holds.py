"""Nodes held for a gang while others make room for it, and the moves under way: plain values kept in each
job's memory between passes (cache/memory.JobMemory.hold, .cooling_until, .move), decided on here.

A hold keeps other gangs off the nodes a preemptor will land on while its victims leave, off the landing
nodes of a gang being defragmented for, or off the nodes a running gang's replacement waits for (its hot
spares lent to backfilling jobs). It ends when its holder is placed or restarted, gone, or at its deadline;
a preemptor whose hold timed out cools for as long before it may plan again."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import PlacedReason


@dataclass(frozen=True)
class Hold:
    """Nodes held for a gang while others leave (monotonic deadline)."""

    nodes: frozenset[str]
    victims: tuple[str, ...]
    until: float
    spare: bool = False  # for a running gang's replacement (its spares lent to backfilling jobs)
    reason: PlacedReason = PlacedReason.PREEMPTING  # or DEFRAGMENTING: what the holder's Placed says


@dataclass(frozen=True)
class PendingMove:
    """A running gang asked to leave nodes so a waiting gang fits (defragmentation)."""

    nodes: frozenset[str]  # the mover's nodes to leave
    waiting: Key  # the gang it makes room for
    restart_count: int  # the mover's attempt when asked: a later one has moved
    until: float  # monotonic: called off after this


def held_for_others(holds: Mapping[Key, Hold], key: Key) -> frozenset[str]:
    """Nodes held for every gang but this one."""
    out: set[str] = set()
    for holder, hold in holds.items():
        if holder != key:
            out |= hold.nodes
    return frozenset(out)


@dataclass(frozen=True)
class Expired:
    """A hold given up at its deadline: its holder cools (unless the hold was a replacement's), and says why."""

    key: Key
    hold: Hold
    message: str


def expire(holds: Mapping[Key, Hold], jobs: Mapping[Key, Job], mono: float, hold_seconds: float,
           usable: Callable[[str], bool] = lambda _: True) -> tuple[dict[Key, Hold], list[Key], list[Expired]]:
    """(the holds kept, the holds that served their purpose or lost their holder, the holds that timed out).
    A preemptor's or waiting gang's hold ends once it is placed; a replacement's while its gang restarts. A
    preemptor's or waiting gang's hold also ends, with no cooling, as soon as a node it holds is no longer
    `usable` (cordoned, NotReady, deleted): the gang is planned again at once instead of waiting out the hold
    for nodes it cannot have."""
    kept: dict[Key, Hold] = {}
    done: list[Key] = []
    timed_out: list[Expired] = []
    for key, hold in holds.items():
        job = jobs.get(key)
        if job is None or job.deleting or (job.placement is not None and not hold.spare):
            done.append(key)
            continue
        if not hold.spare and not all(usable(node) for node in hold.nodes):
            done.append(key)
            continue
        if mono < hold.until:
            kept[key] = hold
            continue
        if hold.spare:  # a running gang's restart goes ahead from what is free (recovery)
            done.append(key)
            continue
        gone = "stay requeued" if hold.reason == PlacedReason.PREEMPTING else "run on where they are"
        timed_out.append(Expired(key, hold, (
            f"the nodes held for it ({len(hold.nodes)}) were not free within {hold_seconds:.0f}s "
            f"(RAILYARD_PREEMPTION_HOLD_SECONDS): released; {', '.join(hold.victims) or 'nobody'} {gone}")))
    return kept, done, timed_out


def settle_moves(moves: Mapping[Key, PendingMove], jobs: Mapping[Key, Job], mono: float
                 ) -> tuple[list[Key], list[tuple[Key, str]]]:
    """(the movers that moved: their move is done, the moves no longer wanted with why). A move is done once
    the mover is off the nodes it was to leave (a restart for another reason that left it there does not
    count); it is off once the gang it makes room for is gone or placed, or its time ran out."""
    done: list[Key] = []
    off: list[tuple[Key, str]] = []
    for key, move in moves.items():
        mover = jobs.get(key)
        if mover is None:
            done.append(key)
            continue
        if mover.restart_count != move.restart_count:
            still = mover.placement is not None and any(r.node in move.nodes for r in mover.placement.ranks)
            if not still:  # it moved (or restarted elsewhere for another reason)
                done.append(key)
                continue
            # It restarted for another reason and is still on the nodes it was to leave: the move goes on
            # (its assessment still sees the nodes to leave, and asks again).
        waiting = jobs.get(move.waiting)
        if waiting is None or waiting.deleting:
            off.append((key, "the gang it made room for is gone"))
        elif waiting.placement is not None:
            off.append((key, "the gang it made room for was placed"))
        elif mono > move.until:
            off.append((key, "its time ran out (RAILYARD_PREEMPTION_HOLD_SECONDS)"))
    return done, off


def waiting_for(moves: Iterable[PendingMove], waiting: Key) -> bool:
    """Whether any move still makes room for this gang."""
    return any(m.waiting == waiting for m in moves)
