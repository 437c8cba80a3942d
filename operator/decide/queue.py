"""The pending-job queue: priority, then age; and the rule that keeps large gangs from starving.

Rule (docs/placement.md, "Queueing and starvation"):
- Jobs are tried in order of priority (higher first), then queuedSince (older first), then name.
- A job that does not fit does not block the jobs behind it (backfill), until it has waited
  `starvationSeconds`. From then on it *reserves* the nodes it is waiting for: the fewest nodes of
  one domain that could hold it, the freest (`reserved_nodes`). Jobs behind it may only use other
  nodes, so capacity freed on those accumulates until it fits.
- One reservation at a time: the first starving job in queue order holds it, and a reservation once
  taken holds across passes (its holder goes first).
- A job that did not fit is solved again only when capacity was freed since, its spec changed, or the
  retry period passed (a pass stays cheap with 200 waiting jobs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from railyard.operator.base.objects import Key
from railyard.topology.model import Snapshot
from railyard.topology.request import GangRequest
from railyard.topology.reservation import reserved_nodes as nodes_to_reserve


@dataclass(frozen=True)
class QueuedJob:
    key: Key
    priority: int
    queued_since: float  # epoch seconds
    request: GangRequest
    avoid: frozenset[str] = frozenset()  # nodes this job may not use for now (bind failures)


@dataclass(frozen=True)
class Failure:
    """Why a queued job did not fit last time, and what capacity and spec it saw then."""

    freed: int  # the state's capacity-freed counter
    generation: int | None  # metadata.generation
    at: float  # wall seconds


def order(jobs: Sequence[QueuedJob]) -> list[QueuedJob]:
    return sorted(jobs, key=lambda j: (-j.priority, j.queued_since, j.key))


def holder_first(ordered: list[QueuedJob], reserving: Callable[[Key], bool]) -> tuple[QueuedJob | None,
                                                                                     list[QueuedJob]]:
    """The job holding the reservation from an earlier pass (it goes first), and the queue in turn.
    Timestamps have one-second resolution, so queue order alone could let a job created in the same
    second slip in front of it."""
    for job in ordered:
        if reserving(job.key):
            return job, [job, *(j for j in ordered if j.key != job.key)]
    return None, ordered


def starving(job: QueuedJob, now: float, starvation_seconds: float) -> bool:
    return now - job.queued_since > starvation_seconds


def worth_solving(failure: Failure | None, freed: int, generation: int | None, now: float,
                  retry_seconds: float) -> bool:
    if failure is None:
        return True
    return failure.freed != freed or failure.generation != generation or now - failure.at > retry_seconds


def reserved_nodes(job: QueuedJob, snapshot: Snapshot) -> frozenset[str]:
    """The nodes a starving job waits for (topology/reservation.py)."""
    return nodes_to_reserve(snapshot, job.request)
