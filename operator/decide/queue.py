"""The pending-job queue: priority, then age; and the rule that keeps large gangs from starving.

Rule (docs/placement.md, "Queueing and starvation"):
- Jobs are tried in order of priority (higher first), then queuedSince (older first), then name; with the
  small-job rule on (RAILYARD_SMALL_JOB_GPUS), a small job waiting longer than RAILYARD_SMALL_JOB_AHEAD_SECONDS
  goes ahead of the larger jobs of its priority.
- A job that does not fit does not block the jobs behind it (backfill), until it has waited
  `starvationSeconds`. From then on it *reserves* the nodes it is waiting for: the fewest nodes of
  one domain that could hold it, the freest (`reserved_nodes`). Jobs behind it may only use other
  nodes, so capacity freed on those accumulates until it fits.
- At most `maxReservations` at a time, on disjoint nodes: a reservation once taken holds across
  passes (its holders go first), and free places go to the starving jobs that waited longest for one.
- A job that did not fit is solved again only when its spec changed, the retry period passed, or
  capacity was freed since and the free GPUs could hold its smallest gang by count (a pass stays cheap
  with 200 waiting jobs, and in a stream where capacity is freed every pass).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import PlacedReason
from railyard.operator.decide.actions import Invalid
from railyard.operator.decide.priority import PriorityClassView, missing_message, resolve
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.reservation import reserved_nodes as nodes_to_reserve


@dataclass(frozen=True)
class QueuedJob:
    key: Key
    priority: int
    queued_since: float  # epoch seconds
    request: GangRequest
    avoid: frozenset[str] = frozenset()  # nodes this job may not use for now (bind failures)


def queued(job: Job, request: GangRequest, now: float, priority: int) -> QueuedJob:
    """A job as the queue sees it. `priority`: its PriorityClass's value (decide/priority.resolve); the nodes
    it avoids: those of a bind failure, until the time its status says."""
    avoid = frozenset(a.node for a in job.status.avoid_nodes if a.until is not None and a.until.timestamp() > now)
    since = job.queued_since
    return QueuedJob(job.key, priority, since.timestamp() if since is not None else now, request, avoid)


def admit(job: Job, request: GangRequest, classes: Mapping[str, PriorityClassView], now: float
          ) -> QueuedJob | Invalid:
    """A job that asks to be placed joins the queue at its PriorityClass's value; a class that does not
    exist keeps it out (PriorityClassNotFound) until an admin creates it."""
    priority = resolve(job.priority_class_name, classes)
    if priority is None:
        return Invalid(PlacedReason.PRIORITY_CLASS_NOT_FOUND, missing_message(job.priority_class_name or ""))
    return queued(job, request, now, priority.value)


@dataclass(frozen=True)
class Failure:
    """Why a queued job did not fit last time, and what capacity and spec it saw then."""

    freed: int  # the state's capacity-freed counter
    generation: int | None  # metadata.generation
    at: float  # wall seconds


def order(jobs: Sequence[QueuedJob], now: float = 0.0, small: Callable[[GangRequest], bool] = lambda _: False,
          small_ahead_seconds: float = 0.0) -> list[QueuedJob]:
    """Priority, then age. A small job (`small`: the small-job rule's, decide/small_jobs.py) that has waited longer
    than `small_ahead_seconds` goes ahead of the larger jobs of its priority, each group in age order: on a busy
    cluster the nodes freed one by one were taken by the large gangs ahead of it (which wait for many anyway),
    and 16-node gangs that must share one TOR waited the longest of the small ones."""
    def later(job: QueuedJob) -> bool:
        return not (small(job.request) and now - job.queued_since > small_ahead_seconds)

    return sorted(jobs, key=lambda j: (-j.priority, later(j), j.queued_since, j.key))


def holders_first(ordered: list[QueuedJob], reserving: Callable[[Key], bool]) -> tuple[list[QueuedJob],
                                                                                      list[QueuedJob]]:
    """The jobs holding reservations from earlier passes (they go first, in queue order), and the
    queue in turn. Timestamps have one-second resolution, so queue order alone could let a job
    created in the same second slip in front of one."""
    holders = [job for job in ordered if reserving(job.key)]
    keys = {job.key for job in holders}
    return holders, [*holders, *(j for j in ordered if j.key not in keys)]


def in_turn(ordered: list[QueuedJob], ranked: Sequence[Key]) -> list[QueuedJob]:
    """The queue with the jobs that may take a reservation (`ranked`, in their turn) in each other's
    places, in turn: when there are more of them than free reservations, or the reservations they
    would take overlap, the first in turn gets it, not the first in the queue."""
    places = [i for i, job in enumerate(ordered) if job.key in set(ranked)]
    by_key = {job.key: job for job in ordered}
    out = list(ordered)
    for place, key in zip(places, (k for k in ranked if k in by_key), strict=True):
        out[place] = by_key[key]
    return out


def starving(job: QueuedJob, now: float, starvation_seconds: float) -> bool:
    return now - job.queued_since > starvation_seconds


def worth_solving(failure: Failure | None, freed: int, generation: int | None, now: float,
                  retry_seconds: float, room: Callable[[], bool]) -> bool:
    """Solve a job that did not fit again when its spec changed or the retry period passed, or when
    capacity was freed since and `room` says the free GPUs could hold it at all: in a stream capacity
    is freed every pass, and a large gang's failing solve is the costliest thing a pass does."""
    if failure is None:
        return True
    if failure.generation != generation or now - failure.at > retry_seconds:
        return True
    return failure.freed != freed and room()


def has_room(snapshot: Snapshot, request: GangRequest, held: frozenset[str] = frozenset()) -> bool:
    """Whether the free GPUs off the `held` nodes (other jobs' reservations) could hold the smallest gang by
    count alone (a necessary condition). Counting the held nodes' free GPUs, a stream re-solved every small
    job that could not fit each pass while a starving gang held the freest nodes."""
    return snapshot.replica_slots(request.gpus_per_replica, held) >= request.smallest


def reserved_nodes(job: QueuedJob, snapshot: Snapshot) -> frozenset[str]:
    """The nodes a starving job waits for (topology/solver/reservation.py)."""
    return nodes_to_reserve(snapshot, job.request)
