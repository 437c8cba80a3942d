"""Small jobs past starvation reservations (RAILYARD_SMALL_JOB_GPUS, docs/placement.md#small-jobs-and-reservations):
which reserved nodes a job may use, declared limit or not, because it is small. A holder waits for every one of its
nodes to empty; a small job on one of them delays the holder only if it outlives the occupants of all the others
still busy, so a job of at most the set number of GPUs may use a holder's nodes while an eighth of them or more
were busy when the pass began (counted then, so the pass's own small placements do not keep a reservation open),
unless the holder's start is known from declared ends (decide/backfill.py) and the job could outlive it: a job
without a limit, or with one ending later, would delay what the holder was promised; an unknown start is not.
A reservation kept for the declared ends of jobs backfilled into it (decide/backfill.py) stays closed: an
occupant without a limit would break the schedule it was kept for. Off (0) by default: then only backfill by
declared limits opens a reservation. Pure: the queue pass (decide/pass_plan.py) asks, once per candidate, and lists
what it lent (`Lent`) for the small job's LentReservedNodes Event."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from railyard.operator.base.objects import Key
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.request import GangRequest

BUSY_DIVISOR = 8  # open while busy nodes x 8 >= the holder's nodes: an eighth of them or more


def asks_gpus(request: GangRequest) -> int:
    """The GPUs a gang asks at its largest (an elastic gang may be placed above its smallest size)."""
    return request.replicas * request.gpus_per_replica


@dataclass
class SmallJobs:
    """One pass's rule: the snapshot it began with (what counts as busy) and the setting."""

    start: Snapshot
    small_job_gpus: int
    _open: dict[tuple[Key, frozenset[str]], bool] = field(default_factory=dict)  # per holder and its nodes

    def is_small(self, request: GangRequest) -> bool:
        # A GPU-less gang asks 0 GPUs whatever its size: it is not what the rule is for.
        return self.small_job_gpus > 0 and request.gpus_per_replica > 0 and asks_gpus(request) <= self.small_job_gpus

    def open_to(self, request: GangRequest, own: Key, held: Mapping[Key, frozenset[str]],
                closed: Collection[Key], delays: Callable[[Key, frozenset[str]], bool]) -> frozenset[str]:
        """The nodes of other gangs' reservations a job of `request` may use as a small job; none of the holders in
        `closed` (kept for what was backfilled into them) nor of those whose expected start the job could delay
        (`delays`: a start known from declared ends that the job would outlive)."""
        if not held or not self.is_small(request):
            return frozenset()
        opened: set[str] = set()
        for holder, nodes in held.items():
            if holder != own and holder not in closed and self._holder_open(holder, nodes) \
                    and not delays(holder, nodes):
                opened |= nodes
        return frozenset(opened)

    def _holder_open(self, holder: Key, nodes: frozenset[str]) -> bool:
        key = (holder, nodes)
        if key not in self._open:
            busy = sum(1 for name in nodes if self.start.has_node(name) and _busy(self.start, name))
            self._open[key] = busy * BUSY_DIVISOR >= len(nodes)
        return self._open[key]


def _busy(snapshot: Snapshot, name: str) -> bool:
    node = snapshot.node(name)
    return len(snapshot.free(node)) < node.gpu_count


@dataclass(frozen=True)
class Lent:
    """A small job placed this pass on nodes reserved for `holder`, by this rule (not by a declared limit)."""

    job: Key
    holder: Key


def lent_message(entry: Lent, small_job_gpus: int) -> str:
    """What the small job's Event says: the holder may wait for it, which is why an admin would want to see it."""
    return (f"placed on nodes reserved for {entry.holder[0]}/{entry.holder[1]} as a small job (at most "
            f"{small_job_gpus} GPUs, RAILYARD_SMALL_JOB_GPUS); that gang starts once these nodes are free again")
