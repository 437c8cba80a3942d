"""The pending-job queue: priority, then age; and the rule that keeps large gangs from starving.

Rule (docs/placement.md, "Queueing and starvation"):
- Jobs are tried in order of priority (higher first), then queuedSince (older first), then name.
- A job that does not fit does not block the jobs behind it (backfill), until it has waited
  `starvationSeconds`. From then on it *reserves* the domain it is waiting for (`reserved_nodes`: the
  tightest domain that could hold it). Jobs behind it may only use nodes outside that domain, so
  capacity freed inside it accumulates until it fits.
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
from railyard.topology.preemption import scopes
from railyard.topology.request import GangRequest


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


# A reserved domain holds this many times the gang's slots when a level allows: one that only just
# holds it fills only when every job in it has ended (the longest-lived of them), a larger one as soon
# as a share of its jobs have.
RESERVATION_HEADROOM = 4


def reserved_nodes(job: QueuedJob, snapshot: Snapshot) -> frozenset[str]:
    """The nodes of the domain a starving job waits for: its required tier's, if it has one; else the
    lowest level whose domains hold RESERVATION_HEADROOM times the gang with nothing else on them
    (else the lowest that holds it at all, else the whole cluster). There, the domain with the most
    free slots now. A 128 x 8 gang on superpod-2k then holds one of its two spines, not the cluster:
    the jobs behind it keep starting in the other."""
    request = job.request
    size = max(1, request.gpus_per_replica)
    levels = scopes(snapshot, request)
    wanted = [request.smallest * RESERVATION_HEADROOM, request.smallest] if request.required_tier is None else \
        [request.smallest]
    for slots_wanted in wanted:
        for _, domains in levels:
            best: tuple[int, str] | None = None
            for domain, names in domains.items():
                nodes = [snapshot.node(name) for name in names]
                if sum(node.gpu_count // size for node in nodes) < slots_wanted:
                    continue
                free = sum(len(snapshot.free(node)) // size for node in nodes)
                if best is None or (-free, domain) < (-best[0], best[1]):
                    best = (free, domain)
            if best is not None:
                return domains[best[1]]
    return frozenset()
