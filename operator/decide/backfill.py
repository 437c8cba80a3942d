"""Backfill into starvation reservations on declared run times (docs/placement.md, "Backfill on declared run
times"): while a starving gang holds nodes, a job with a time limit (spec.timeLimitSeconds) may use a held node
when it ends (1) before the holder's expected start and (2) on that node, within RAILYARD_BACKFILL_TRUST of the
time its occupants still declare. The expected start comes from the declared ends of what occupies the held nodes:
the first time the capacity they free, in the order they end, could hold the holder's smallest gang (every
placement of the pass so far is an occupant: a gang may start starving, and reserve, later in the pass). What declares
no limit may end any moment or never, so a node it occupies is never backfilled, and a free held node neither (the
holder takes it as soon as it fits). A backfilled job ends by the holder's expected start, which never moves; a
job without a limit never uses a reservation (unless an admin lets small jobs, decide/small_jobs.py). Pure: the
queue pass (decide/pass_plan.py) asks; the actor and the simulators list the occupants (`Occupants`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from railyard.operator.base.objects import Job, Key
from railyard.topology.api.timestamps import iso
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.placement import Decision
from railyard.topology.solver.request import GangRequest

NEVER = float("inf")
DEFAULT_GRACE_SECONDS = 30  # a pod's terminationGracePeriodSeconds when its spec says none

# Per node: (when it is expected to have gone, in wall seconds — NEVER when nothing says —, GPUs) of each pod or
# recorded rank that holds GPUs there.
Occupants = Mapping[str, Sequence[tuple[float, int]]]


def expected_end(job: Job | None, pass_seconds: float) -> float:
    """When a placed job's pods are expected gone: its deadline, two passes (one ends the job, the next deletes
    its pods) and its pods' grace period to exit. NEVER without a declared limit (or an owner we do not know)."""
    deadline = job.deadline if job is not None else None
    if job is None or deadline is None:
        return NEVER
    return deadline.timestamp() + 2 * pass_seconds + grace_seconds(job)


def end_if_placed(job: Job, now: float, pass_seconds: float) -> float:
    """When a job placed now would be expected gone (NEVER without a limit)."""
    limit = job.spec.time_limit_seconds if job.spec is not None else None
    if limit is None:
        return NEVER
    return now + limit + 2 * pass_seconds + grace_seconds(job)


def grace_seconds(job: Job) -> float:
    spec = job.spec
    grace = spec.pod_spec.get("terminationGracePeriodSeconds") if spec is not None else None
    return float(grace) if isinstance(grace, int | float) and not isinstance(grace, bool) else DEFAULT_GRACE_SECONDS


def expected_start(nodes: Iterable[str], occupants: Occupants, snapshot: Snapshot, request: GangRequest,
                   now: float) -> float:
    """The first time the `nodes`' capacity — free now, then freed as their occupants end — could hold the
    request's smallest gang by count (NEVER when what never ends keeps it from ever doing so)."""
    per, need = request.gpus_per_replica, request.smallest
    names = [n for n in nodes if snapshot.has_node(n)]
    if per <= 0:
        return now
    free = {n: len(snapshot.free(snapshot.node(n))) for n in names}
    slots = sum(f // per for f in free.values())
    if slots >= need:
        return now
    events = sorted((end, n, gpus) for n in names for end, gpus in occupants.get(n, ()))
    for end, node, gpus in events:
        if end == NEVER:
            return NEVER
        slots -= free[node] // per
        free[node] += gpus
        slots += free[node] // per
        if slots >= need:
            return max(now, end)
    return NEVER


@dataclass(frozen=True)
class Backfilled:
    """A job placed on a holder's reserved nodes: its expected end, the holder's expected start then."""

    job: Key
    holder: Key
    nodes: frozenset[str]  # the holder's reserved nodes when it was placed
    end: float
    start: float


def backfill_message(entry: Backfilled) -> str:
    """What the backfilled job's Event says."""
    return (f"placed on nodes reserved for {entry.holder[0]}/{entry.holder[1]}: its time limit ends by "
            f"{iso(entry.end)}, before that gang could start ({iso(entry.start)})")


@dataclass
class Backfill:
    """One pass's backfill bookkeeping: the occupants (listed once, when first needed) with this pass's own
    placements added, and the holders' expected starts."""

    occupants: Callable[[], Occupants]
    now: float
    pass_seconds: float
    trust: float = 1.0  # RAILYARD_BACKFILL_TRUST
    _listed: dict[str, list[tuple[float, int]]] | None = None
    _taken: list[tuple[str, float, int]] = field(default_factory=list)  # the pass's placements, before the listing
    # Expected starts until the next placement: the pass hands `_start` its snapshot, which changes only there.
    _starts: dict[tuple[Key, frozenset[str]], float] = field(default_factory=dict)
    backfilled: list[Backfilled] = field(default_factory=list)

    def _occupants(self) -> dict[str, list[tuple[float, int]]]:
        if self._listed is None:
            self._listed = {node: list(entries) for node, entries in self.occupants().items()}
            for node, end, gpus in self._taken:  # placed this pass: not in the listing yet
                self._listed.setdefault(node, []).append((end, gpus))
        return self._listed

    def occupy(self, job: Job, decision: Decision) -> float:
        """A placement of the pass: it occupies every node it landed on until its declared end (NEVER without
        one), reserved or not — a gang that starts starving later in the pass may reserve those nodes. Returns
        that end."""
        end = end_if_placed(job, self.now, self.pass_seconds)
        if decision.placement is None:
            return end
        for node, gpus in decision.placement.allocations:
            if self._listed is None:
                self._taken.append((node, end, len(gpus)))
            else:
                self._listed.setdefault(node, []).append((end, len(gpus)))
        self._starts.clear()  # the snapshot and the occupants changed
        return end

    def _start(self, holder: Key, nodes: frozenset[str], request: GangRequest, current: Snapshot) -> float:
        """The holder's expected start on `nodes` (`current`: the pass's snapshot, placements so far taken)."""
        key = (holder, nodes)
        if key not in self._starts:
            self._starts[key] = expected_start(nodes, self._occupants(), current, request, self.now)
        return self._starts[key]

    def open_to(self, job: Job, held: Mapping[Key, frozenset[str]], requests: Mapping[Key, GangRequest],
                current: Snapshot) -> dict[Key, tuple[float, frozenset[str]]]:
        """The holders whose nodes `job` may use (its declared end is before their expected start), with
        those starts and the nodes open to it; none for a job without a limit."""
        end = end_if_placed(job, self.now, self.pass_seconds)
        if end == NEVER or not held:
            return {}
        out = {}
        listed = self._occupants()
        for holder, nodes in held.items():
            if holder == job.key or holder not in requests:
                continue
            start = self._start(holder, nodes, requests[holder], current)
            if not end <= start < NEVER:
                continue
            opened = frozenset(n for n in nodes if self._fits_before(end, [e for e, _ in listed.get(n, ())]))
            if opened:
                out[holder] = (start, opened)
        return out

    def would_delay(self, job: Job, requests: Mapping[Key, GangRequest], current: Snapshot, holder: Key,
                    nodes: frozenset[str]) -> bool:
        """Whether `job` placed now on `holder`'s `nodes` could delay the holder's expected start: a start known
        from declared ends that the job would outlive (a job without a limit outlives any). An unknown start
        (NEVER) cannot be delayed."""
        request = requests.get(holder)
        if request is None:  # not a waiting gang's: nothing to read its start from, so nothing lent
            return True
        start = self._start(holder, nodes, request, current)
        return start < NEVER and end_if_placed(job, self.now, self.pass_seconds) > start

    def _fits_before(self, end: float, ends: Sequence[float]) -> bool:
        """Whether a job ending at `end` may use a reserved node whose occupants end at `ends`: only a node in use
        until a declared time (a free one is the holder's to take as soon as it fits), and within the trusted
        share of what its occupants still declare."""
        if not ends or max(ends) == NEVER:
            return False
        return end - self.now <= (max(ends) - self.now) * self.trust

    def placed(self, job: Job, decision: Decision, held: Mapping[Key, frozenset[str]],
               open_to: Mapping[Key, tuple[float, frozenset[str]]]) -> None:
        """A placement of the pass: what it occupies (`occupy`), and the holders it backfilled."""
        end = self.occupy(job, decision)
        if decision.placement is None:
            return
        landed = {node for node, _ in decision.placement.allocations}
        for holder, (start, _) in open_to.items():
            nodes = held.get(holder, frozenset())
            if landed & nodes:
                self.backfilled.append(Backfilled(job.key, holder, nodes, end, start))
