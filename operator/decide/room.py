"""Making room for a queued gang that does not fit: gangs moved out of one domain where it fits by free GPUs
(defragmentation, `spec.preemption.migratable`), else whole lower-priority gangs evicted (preemption). Pure:
a function of the pass's snapshot and the values in `RoomView`; what it decides (a hold to wait on, victims
to mark, moves to start) the actors carry out (act/preemptions.py, act/moves.py).

Planning looks past what is already leaving (Terminating pods, marked victims): a preemptor that fits once
they have gone waits for them and chooses nobody new, so evictions are never wasted by switching domains
between passes, and an operator restart does not pick a second set of victims."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import ConditionType, PlacedReason
from railyard.operator.base.settings import Settings
from railyard.operator.decide.conditions import saving_for_preemption as saving
from railyard.operator.decide.holds import Hold, PendingMove
from railyard.operator.decide.preemption_rules import HOUR, lost_gpu_seconds, recent_preemptions, shrink_sizes
from railyard.operator.decide.priority import PriorityClassView, may_preempt, ranked_priority, resolve
from railyard.operator.decide.queue import QueuedJob
from railyard.topology.api.job import Parallelism
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.defrag import MigrationPlan, Mover, fits_by_gpus, plan_migration
from railyard.topology.solver.elastic import valid_size
from railyard.topology.solver.placement import Decision
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.victims import PreemptionPlan, RunningGang, plan_preemption

Slots = list[tuple[str, tuple[int, ...], Mapping[str, int]]]  # (node, GPUs, requests) on their way out
Decide = Callable[[Snapshot, GangRequest], Decision]


@dataclass(frozen=True)
class RoomView:
    """What planning room reads: every job as parsed, the PriorityClasses, the holds and moves under way
    (the pass adds its own to these mappings as it decides), the moves started this hour, what Terminating
    pods free (`leaving(jobs)`: of these jobs, None: of anyone), when a job last saved its work, the
    settings and the clocks."""

    jobs: Mapping[Key, Job]
    classes: Mapping[str, PriorityClassView]
    holds: dict[Key, Hold]
    cooling: Mapping[Key, float]  # monotonic: a timed-out holder plans nothing new before this
    moves: dict[Key, PendingMove]
    moves_started: list[float]  # monotonic
    leaving: Callable[[Iterable[Key] | None], Slots]
    last_saved: Callable[[Job], float | None]
    settings: Settings
    now: float  # wall seconds
    mono: float
    decide: Decide  # where a gang goes on a snapshot: the pass's decision function (inter-pod rules included)

    @cached_property
    def lowest_placed_priority(self) -> int | None:
        values = [ranked_priority(job, self.classes) for job in self.jobs.values()
                  if job.placement is not None and not job.finished]
        return min(values, default=None)

    @cached_property
    def preempted_for(self) -> Mapping[str, list[Key]]:
        """The gangs whose status says they were preempted for `namespace/name`."""
        victims: dict[str, list[Key]] = {}
        for key, job in self.jobs.items():
            if job.status.preempted_by:
                victims.setdefault(job.status.preempted_by, []).append(key)
        return victims

    def cooling_down(self, key: Key) -> bool:
        """Its last hold timed out a while ago: this operator's memory, or the status (a new leader's)."""
        job = self.jobs.get(key)
        after = job.status.room_retry_after if job is not None else None
        return self.cooling.get(key, float("-inf")) > self.mono or (after is not None and after.timestamp() > self.now)

    def might_preempt_for(self, priority: int) -> bool:
        """Whether some placed gang has a lower priority than this (one that does not fit may evict it)."""
        lowest = self.lowest_placed_priority
        return lowest is not None and lowest < priority


@dataclass(frozen=True)
class Room:
    """How room is made for a gang: its Placed reason, and what the actors start (nothing new when it
    only waits on its hold)."""

    reason: PlacedReason  # PREEMPTING or DEFRAGMENTING
    message: str = ""  # the Placed message's tail (a preemption's is its actor's: did every mark go through)
    hold: Hold | None = None  # wait on this (it fits once the gangs chosen for it have gone)
    preemption: PreemptionPlan | None = None  # victims to mark, then the hold
    migration: MigrationPlan | None = None  # movers to ask, then the hold


def moves_this_hour_seen(remembered: Sequence[float], jobs: Mapping[Key, Job], now: float, mono: float
                         ) -> list[float]:
    """When the last hour's defragmentation moves started (monotonic): this operator's memory, or, when the
    status says more moved (a new leader's memory is empty), when each moved gang restarted
    (status.lastMigration): the hourly cap outlives leaders."""
    recorded = sorted(mono - (now - t.timestamp()) for job in jobs.values()
                      if (t := job.status.last_migration) is not None and now - t.timestamp() < HOUR)
    remembered = [t for t in remembered if mono - t < HOUR]
    return list(remembered) if len(remembered) >= len(recorded) else recorded


def make_room(view: RoomView, job: Job, candidate: QueuedJob, snapshot: Snapshot) -> Room | None:
    """Moves first (nobody loses more than a checkpoint interval and everyone keeps running), else victims;
    None: nobody can make room (or it comes anyway)."""
    held = view.holds.get(candidate.key)
    if held is not None:
        return Room(held.reason, hold_message(held), hold=held)
    moves = plan_moves(view, job, candidate, snapshot)
    if moves is not None:
        return Room(PlacedReason.DEFRAGMENTING, migration_summary(moves), migration=moves)
    plan = plan_preemption_for(view, job, candidate, snapshot)
    if plan is None:
        return None
    if isinstance(plan, Hold):
        return Room(PlacedReason.PREEMPTING, f"waiting for {len(plan.nodes)} nodes that lower-priority gangs are "
                    "leaving (held for it)", hold=plan)
    return Room(PlacedReason.PREEMPTING, preemption=plan)


# --- preemption ----------------------------------------------------------------------------------------

def victims(view: RoomView, priority: int, exclude: Key) -> list[RunningGang]:
    """Running gangs of lower priority that may be evicted now (under the hourly cap, not already marked)."""
    settings = view.settings
    lowest = view.lowest_placed_priority
    if lowest is None or lowest >= priority:
        return []  # on most clusters most gangs share a priority: nobody to evict, no scan
    out = []
    for key, job in view.jobs.items():
        if key == exclude or job.deleting or job.finished or job.placement is None or job.spec is None:
            continue
        own = ranked_priority(job, view.classes)
        if own >= priority:
            continue  # first: on most clusters most gangs share a priority (asked per waiting gang)
        placed = job.condition(ConditionType.PLACED)
        if placed is None or placed.reason != PlacedReason.RELEASED or job.is_true(ConditionType.PREEMPTED):
            continue
        if len(recent_preemptions(job.status.preemptions, view.now)) >= settings.preemption.per_hour:
            continue
        ranks = sorted(job.placement.ranks, key=lambda r: r.rank)
        slots = tuple((r.node, tuple(r.gpus)) for r in ranks)
        gpus = sum(len(g) for _, g in slots)
        request, spec = job.request, job.spec
        gpus_per_replica, parallelism = spec.gpus_per_replica, spec.parallelism

        def valid(n: int, g: int = gpus_per_replica, p: Parallelism | None = parallelism) -> bool:
            return valid_size(n, g, p)

        sizes = shrink_sizes(len(slots), spec.effective_min_replicas, valid)
        out.append(RunningGang(f"{key[0]}/{key[1]}", own, slots,
                               lost_gpu_seconds(gpus, view.last_saved(job), view.now),
                               dict(request.resources) if request is not None else {}, sizes))
    return out


def leaving(view: RoomView, key: Key, only_for: str | None) -> Slots:
    """GPUs (and requests) on their way out: Terminating pods, and gangs marked as victims; with
    `only_for`, only those of gangs preempted for that gang (namespace/name)."""
    chosen = None if only_for is None else view.preempted_for.get(only_for, [])
    if chosen == []:
        return []  # nobody was preempted for that gang (asked every pass for every gang that waits)
    out = list(view.leaving(chosen))
    for other, job in view.jobs.items():
        if other == key or job.placement is None or not saving(job):
            continue
        if only_for is not None and job.status.preempted_by != only_for:
            continue
        resources = dict(job.request.resources) if job.request is not None else {}
        dropping = set(job.status.shrink_ranks or ()) if job.status.shrink_to is not None else None
        out += [(r.node, tuple(r.gpus), resources) for r in job.placement.ranks
                if dropping is None or r.rank in dropping]  # a shrink frees only the ranks it drops
    return out


def without(snapshot: Snapshot, slots: Slots) -> Snapshot:
    """The snapshot with these slots freed."""
    for node, gpus, requests in slots:
        if snapshot.has_node(node):
            snapshot = snapshot.release([(node, tuple(g for g in gpus if g in snapshot.used.get(node, frozenset())))],
                                        requests)
    return snapshot


def plan_preemption_for(view: RoomView, job: Job, candidate: QueuedJob, snapshot: Snapshot
                        ) -> PreemptionPlan | Hold | None:
    """For a queued gang that did not fit on `snapshot`: a plan whose victims are to be evicted; a Hold
    (it fits once the gangs preempted for it have gone: wait for them, evict nobody new); or None
    (it fits once what others are leaving has gone, or nobody can make room)."""
    settings = view.settings
    if not settings.preemption.enabled or job.spec is None or candidate.key in view.holds \
            or view.cooling_down(candidate.key):
        return None
    priority = resolve(job.priority_class_name, view.classes)
    if priority is None or not may_preempt(priority, job.spec.preemption.policy):
        return None
    me = f"{job.namespace}/{job.name}"
    mine = leaving(view, candidate.key, me)
    if mine:  # victims chosen for it before (this operator's, or a predecessor's) are still leaving
        waiting = view.decide(without(snapshot, mine), candidate.request).placement
        if waiting is not None:
            names = tuple(sorted({f"{k[0]}/{k[1]}" for k, j in view.jobs.items() if j.status.preempted_by == me}))
            return Hold(frozenset(r.node for r in waiting.replicas), names,
                        view.mono + settings.preemption.hold_seconds)
    candidates = [c for c in victims(view, candidate.priority, candidate.key) if
                  all(snapshot.has_node(n) for n in c.nodes)]
    if not candidates:
        return None  # nobody it may evict: no solve spent on it
    after = without(snapshot, leaving(view, candidate.key, None))
    if view.decide(after, candidate.request).placed:
        return None  # room is coming anyway: nobody new is evicted for it
    return plan_preemption(after, candidate.request, candidates, decide=view.decide)


# --- defragmentation -------------------------------------------------------------------------------------

def movers(view: RoomView, priority: int, exclude: Key) -> list[Mover]:
    """Running gangs of equal or lower priority that allow a move and were not moved within the interval."""
    settings = view.settings
    out = []
    for key, job in view.jobs.items():
        spec, placement, request = job.spec, job.placement, job.request
        if key == exclude or key in view.moves or job.deleting or job.finished or spec is None or \
                placement is None or request is None or not spec.preemption.migratable:
            continue
        placed = job.condition(ConditionType.PLACED)
        if placed is None or placed.reason != PlacedReason.RELEASED or job.is_true(ConditionType.PREEMPTED):
            continue
        own = ranked_priority(job, view.classes)
        if own > priority:
            continue
        moved = job.status.last_migration
        if moved is not None and view.now - moved.timestamp() < settings.defragmentation.interval_seconds:
            continue  # moved recently: never twice within the interval
        restart = job.status.last_restart
        slots = tuple((r.node, tuple(r.gpus)) for r in sorted(placement.ranks, key=lambda r: r.rank))
        gpus = sum(len(g) for _, g in slots)
        began = restart.released_at if restart is not None and restart.released_at is not None else \
            job.status.start_time
        saved = job.status.last_checkpoint.time if job.status.last_checkpoint is not None else began
        lost = lost_gpu_seconds(gpus, saved.timestamp() if saved is not None else None, view.now)
        out.append(Mover(RunningGang(f"{key[0]}/{key[1]}", own, slots, lost, dict(request.resources)),
                         request))
    return out


def moves_this_hour(started: Sequence[float], mono: float) -> tuple[float, ...]:
    return tuple(t for t in started if mono - t < HOUR)


def migration_summary(plan: MigrationPlan) -> str:
    names = ", ".join(m.key for m in plan.moves)
    return (f"moving {names} out of {plan.level} {plan.domain} "
            f"({plan.lost_gpu_seconds / 3600:.2f} GPU-hours since their last checkpoints), then it lands there")


def hold_message(hold: Hold) -> str:
    """What a gang waiting on its hold says (Placed)."""
    if hold.victims:
        return f"making room: {', '.join(hold.victims)} leaving; the nodes are held for it"
    return f"waiting for {len(hold.nodes)} nodes other gangs are leaving (held for it)"


def plan_moves(view: RoomView, job: Job, candidate: QueuedJob, snapshot: Snapshot) -> MigrationPlan | None:
    settings = view.settings
    if not settings.defragmentation.enabled or candidate.key in view.holds or view.cooling_down(candidate.key):
        return None
    recent = moves_this_hour(view.moves_started, view.mono)
    if len(recent) >= settings.defragmentation.migrations_per_hour or not fits_by_gpus(snapshot, candidate.request):
        return None
    options = [m for m in movers(view, candidate.priority, candidate.key)
               if all(snapshot.has_node(n) for n in m.gang.nodes)]
    plan = plan_migration(snapshot, candidate.request, options, decide=view.decide)
    if plan is None or len(recent) + len(plan.moves) > settings.defragmentation.migrations_per_hour:
        return None
    return plan
