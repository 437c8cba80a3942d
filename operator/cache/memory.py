"""What the operator remembers about each job between passes that is not in the job's status (Kopf's
per-object memory): one record per job, keyed by uid, recalled and forgotten as a unit.

A job deleted and re-created under the same name is a new uid, so it starts with a blank record;
records of jobs that are gone are dropped in one place (`Memories.retain`, once a pass).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from railyard.operator.base.objects import Job, Key
from railyard.operator.decide.goodput_ledger import Ledger
from railyard.operator.decide.holds import Hold, PendingMove
from railyard.operator.decide.pass_plan import QueueMemory
from railyard.operator.decide.queue import Failure
from railyard.operator.decide.rank_addresses import Addresses
from railyard.operator.decide.resize_plan import GrowAttempt
from railyard.operator.decide.stragglers import StragglerTracker
from railyard.topology.cluster.faults import NodeLoss
from railyard.topology.solver.placement import Decision


@dataclass(frozen=True)
class CheckpointRequest:
    """Every rank was asked to save `step`; the request is answered when all did, or at `deadline`
    (wall seconds). One request serves an eviction and a resize."""

    step: int
    deadline: float


@dataclass
class FaultSaveRequest:
    """The survivors of attempt `restart_count` were asked to save their last completed step (decide/fault_save);
    answered when every saver saved the same step (`saved`), or at `deadline` (wall seconds)."""

    restart_count: int
    savers: dict[int, tuple[int, ...]]
    deadline: float
    after_step: int | None  # the last committed step when asked: the answer must be newer
    saved: tuple[int, str] | None = None


@dataclass
class JobMemory:
    uid: str
    failure: Failure | None = None  # why it did not fit last time (the queue's retry rule)
    losses_seen_at: float | None = None  # monotonic: when its first unhandled loss was seen (debounce)
    flushed_at: float = float("-inf")  # monotonic: report-derived status last written
    checkpoint: CheckpointRequest | None = None
    fault_save: FaultSaveRequest | None = None
    evicting: str | None = None  # the straggler to evict once the checkpoint is in
    straggler: tuple[int, NodeLoss] | None = None  # (attempt, the slow node) to restart it without: assess sees it
    goodput: Ledger | None = None  # decide/goodput_ledger: accounted up to now, written to status now and then
    goodput_written: float = float("-inf")  # monotonic: status.goodput last written
    goodput_restart: str | None = None  # lastRestart.decidedAt already accounted as detection
    grow: GrowAttempt | None = None
    released: tuple[str, float] | None = None  # (placement id, monotonic): when its release was seen
    released_at: tuple[str, float] | None = None  # (placement id, wall): this operator's release, until recorded
    terminating_seen: frozenset[str] = frozenset()  # its pods seen Terminating on the last look
    terminating_left: float | None = None  # monotonic: when one of those was last seen gone (bind progress)
    infra_restarts: list[float] = field(default_factory=list)  # monotonic times, the last hour's
    failure_streak: int = 0  # process failures in a row, each after a short attempt (decide/policy)
    reserved_at: float | None = None  # monotonic: when it took the starvation reservation
    reservation_ended: float | None = None  # monotonic: when its last reservation ran out (rotation)
    reserved: frozenset[str] = frozenset()  # the nodes its starvation reservation held after the last pass
    backfilled_into: bool = False  # jobs were backfilled into that reservation: it keeps those nodes
    fits_empty: tuple[int, Decision | None] | None = None  # (the nodes' epoch, why it never fits, or None)
    hold: Hold | None = None  # nodes held for it while others make room (decide/holds.py)
    cooling_until: float = float("-inf")  # monotonic: its last hold timed out; it plans no new room before
    move: PendingMove | None = None  # it is asked to leave nodes so a waiting gang fits (defragmentation)
    endpoints: Addresses | None = None  # what its EndpointSlice was last written with (decide/rank_addresses)
    endpoints_partial_since: float | None = None  # monotonic: since when some of its ranks have an IP
    # (pods_changed, job resourceVersion) when its addresses last called for no write: unchanged since,
    # they still call for none (a pass skips building them: ~10 % of the operator's CPU on a busy cluster)
    endpoints_checked: tuple[int | None, str | None] | None = None
    # The same, when a finished job was last Done with no pod of it Terminating: it stays Done until
    # one of them changes (the loop skips it; a busy cluster's finished jobs outnumber its live ones)
    done: tuple[int | None, str | None] | None = None
    # ((pods_changed, job resourceVersion), nodes' epoch) when a Running gang was last steady
    # (decide/assess.steady) and assessed Wait: unchanged since, it is Wait again (the loop skips it)
    steady: tuple[tuple[int | None, str | None], int] | None = None
    backoff_until: float = 0.0  # monotonic: left alone until then (repeated errors on this job)
    errors: int = 0  # consecutive errors handling it
    # How long each node has been slow, for the current attempt only (restart count, tracker).
    stragglers: tuple[int, StragglerTracker] | None = field(default=None, repr=False)

    def queue_memory(self) -> QueueMemory:
        return QueueMemory(self.failure, self.reserved_at, self.reservation_ended, self.fits_empty, self.reserved,
                           self.backfilled_into)

    def remember_queue(self, value: QueueMemory) -> None:
        self.failure, self.reserved_at = value.failure, value.reserved_at
        self.reservation_ended, self.fits_empty = value.reservation_ended, value.fits_empty
        self.reserved, self.backfilled_into = value.reserved, value.backfilled_into

    def tracker(self, restart_count: int) -> StragglerTracker | None:
        if self.stragglers is None or self.stragglers[0] != restart_count:
            return None
        return self.stragglers[1]


class Memories:
    def __init__(self) -> None:
        self._by_uid: dict[str, JobMemory] = {}
        # Cluster-wide, not any one job's: when the defragmentation moves of the last hour started (monotonic).
        self.moves_started: list[float] = []

    def __len__(self) -> int:
        return len(self._by_uid)

    def recall(self, job: Job) -> JobMemory:
        memory = self._by_uid.get(job.uid)
        if memory is None:
            memory = self._by_uid[job.uid] = JobMemory(job.uid)
        return memory

    def peek(self, job: Job) -> JobMemory | None:
        return self._by_uid.get(job.uid)

    def forget_all(self) -> None:
        """Leadership ended: what this replica remembered is not the next leader's, nor its own if it leads
        again (it starts from the status, as any new leader)."""
        self._by_uid.clear()
        self.moves_started.clear()

    def retain(self, jobs: Iterable[Job]) -> None:
        """Forget every job that is not among these."""
        alive = {job.uid for job in jobs}
        for uid in [u for u in self._by_uid if u not in alive]:
            del self._by_uid[uid]


def holds(memories: Memories, jobs: Mapping[Key, Job]) -> dict[Key, Hold]:
    """Every job's hold, by job."""
    return {key: memory.hold for key, job in jobs.items() if (memory := memories.peek(job)) is not None
            and memory.hold is not None}


def reservations(memories: Memories, jobs: Mapping[Key, Job]) -> dict[Key, frozenset[str]]:
    """Every starvation reservation of the last pass, by holder."""
    return {key: memory.reserved for key, job in jobs.items() if (memory := memories.peek(job)) is not None
            and memory.reserved}


def moves(memories: Memories, jobs: Mapping[Key, Job]) -> dict[Key, PendingMove]:
    """Every move under way, by mover."""
    return {key: memory.move for key, job in jobs.items() if (memory := memories.peek(job)) is not None
            and memory.move is not None}


def cooling(memories: Memories, jobs: Mapping[Key, Job]) -> dict[Key, float]:
    return {key: memory.cooling_until for key, job in jobs.items() if (memory := memories.peek(job)) is not None
            and memory.cooling_until > float("-inf")}
