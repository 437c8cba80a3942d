"""One queue pass, decided: which waiting gangs are placed where, which wait and why (typed), which hold a
starvation reservation, which make room (victims to mark, gangs to move, nodes to hold). A pure function of
the pass's snapshot and plain values (`PassInput`): the operator's actor (act/queue_pass.py) and the
simulators (hack/bench) run this same function; the actor only carries the plan out.

Each gang is solved in queue order on the snapshot with the capacity of those placed earlier in the pass
taken (decide/queue.py has the queue's rule: order, starvation, reservations, when a failed gang is solved
again); a gang that does not fit tries to make room (decide/room.py). `plan_pass` is a generator that yields
between solves, so the event loop that drives it stays responsive; its return value is the plan."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import ConditionType, PlacedReason
from railyard.operator.base.settings import Settings
from railyard.operator.decide import queue
from railyard.operator.decide.backfill import Backfill, Backfilled, Occupants
from railyard.operator.decide.holds import Expired, Hold, PendingMove, expire, held_for_others
from railyard.operator.decide.preemption_rules import parse_key
from railyard.operator.decide.queue import Failure, QueuedJob
from railyard.operator.decide.room import Room, RoomView, make_room
from railyard.operator.decide.small_jobs import Lent, SmallJobs
from railyard.operator.decide.spares import spare_nodes
from railyard.topology.cluster.affinity import PodInfo, has_inter_pod_rules
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.decision import decide, never_fits, placed_pods, taken
from railyard.topology.solver.defrag import fits_by_gpus
from railyard.topology.solver.placement import Decision
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.reservation import still_holds

Fits = tuple[int, Decision | None]  # (the nodes' epoch, why the gang never fits this cluster, or None)


@dataclass(frozen=True)
class QueueMemory:
    """What the queue remembers of a job between passes (cache/memory.JobMemory's fields), as a value."""

    failure: Failure | None = None  # why it did not fit last time (the retry rule)
    reserved_at: float | None = None  # monotonic: when it took its starvation reservation
    reservation_ended: float | None = None  # monotonic: when its last reservation ran out (rotation)
    fits_empty: Fits | None = None
    reserved: frozenset[str] = frozenset()  # the nodes its reservation holds after the last pass
    # Jobs backfilled into its reservation (decide/backfill.py): it keeps those nodes, which are less free only
    # until a time it knows, rather than move to nodes that merely look freer now.
    backfilled_into: bool = False


@dataclass(frozen=True)
class PassInput:
    snapshot: Snapshot
    waiting: Sequence[QueuedJob]
    jobs: Mapping[Key, Job]
    memory: Mapping[Key, QueueMemory]
    room: RoomView  # holds before this pass's expiry; the pass adds its own
    reserving: frozenset[Key]  # jobs whose Placed condition says Reserving (holders from earlier passes)
    pod_infos: Callable[[], list[PodInfo]]  # existing pods as inter-pod rules see them (read only when needed)
    freed: int  # the state's capacity-freed counter
    node_epoch: int  # changes when the node set does
    now: float
    mono: float
    settings: Settings
    over_budget: Callable[[], bool] = lambda: False  # the pass's solve time is spent: the rest waits
    occupants: Callable[[], Occupants] = dict  # what holds GPUs per node and its declared end (read when needed)


@dataclass(frozen=True)
class Unplaced:
    key: Key
    decision: Decision  # its reason: the binding constraint (and what else the queue says of it)
    reason: PlacedReason
    room: Room | None = None  # how room is being made for it (the actor starts what is new)

    def message(self, making_room: str | None = None) -> str:
        """What its Placed condition says: the binding constraint, how room is being made (as the actor
        reports it), and why it waits when it waits for reserved nodes."""
        message = self.decision.reason or "no placement"
        if making_room is not None:
            message = f"{message}; {making_room}"
        if self.reason == PlacedReason.RESERVING:
            message += "; waited past the starvation limit: the nodes it waits for are reserved"
        return message


@dataclass(frozen=True)
class Failed:
    """A job whose planning raised: reported as that job's error, the pass goes on."""

    key: Key
    stage: str
    error: Exception


@dataclass
class PassPlan:
    placed: list[tuple[Key, Decision]] = field(default_factory=list)  # in queue order
    priorities: dict[Key, int] = field(default_factory=dict)  # the value each placed gang was queued at
    unplaced: list[Unplaced] = field(default_factory=list)
    memory: dict[Key, QueueMemory] = field(default_factory=dict)  # the values to remember, changed ones only
    holds: dict[Key, Hold] = field(default_factory=dict)  # every hold after the pass
    released: list[Key] = field(default_factory=list)  # holds that served their purpose (or lost their holder)
    expired: list[Expired] = field(default_factory=list)  # holds that timed out: their holders cool
    moves: dict[Key, PendingMove] = field(default_factory=dict)  # moves started this pass (mover -> move)
    moves_started: list[float] = field(default_factory=list)  # monotonic, this hour's, this pass's included
    failed: list[Failed] = field(default_factory=list)
    solves: list[float] = field(default_factory=list)  # seconds each solve took
    budget_spent: bool = False  # jobs were left for the next pass
    after: Snapshot | None = None  # the snapshot with every placement of the pass taken
    backfilled: list[Backfilled] = field(default_factory=list)  # jobs placed on reserved nodes by their limits
    lent: list[Lent] = field(default_factory=list)  # small jobs placed on reserved nodes (decide/small_jobs.py)


def _union(sets: Iterable[frozenset[str]]) -> frozenset[str]:
    return frozenset().union(*sets)


class _Pass:
    """The pass's working values (local to one `plan_pass` call)."""

    def __init__(self, given: PassInput) -> None:
        self.given = given
        self.memory: dict[Key, QueueMemory] = dict(given.memory)
        self.changed: set[Key] = set()

    def recall(self, key: Key) -> QueueMemory:
        return self.memory.get(key) or QueueMemory()

    def remember(self, key: Key, **values: object) -> QueueMemory:
        value = replace(self.recall(key), **values)  # type: ignore[arg-type]
        self.memory[key] = value
        self.changed.add(key)
        return value

    def fits_empty(self, key: Key, request: GangRequest, snapshot: Snapshot) -> Decision | None:
        """None when the gang fits the cluster with nothing else on it; else the empty cluster's reason."""
        memory = self.recall(key)
        epoch = self.given.node_epoch
        if memory.fits_empty is None or memory.fits_empty[0] != epoch:
            memory = self.remember(key, fits_empty=(epoch, never_fits(snapshot, request)))
        assert memory.fits_empty is not None
        return memory.fits_empty[1]

    def holders(self, ordered: list[QueuedJob]) -> tuple[list[QueuedJob], list[QueuedJob]]:
        """The jobs holding reservations (they go first), but for those whose time box ran out: they give
        theirs up, and other starving jobs may take it."""
        given = self.given
        holding, ordered = queue.holders_first(ordered, lambda key: key in given.reserving)
        kept = []
        for holder in holding:
            memory = self.recall(holder.key)
            if memory.reserved_at is None:  # held before this operator started: its box runs from Reserving's start
                job = given.jobs.get(holder.key)
                placed = job.condition(ConditionType.PLACED) if job is not None else None
                began = placed.last_transition_time if placed is not None else None
                since = max(0.0, given.now - began.timestamp()) if began is not None else 0.0
                memory = self.remember(holder.key, reserved_at=given.mono - since)
            assert memory.reserved_at is not None
            if given.mono - memory.reserved_at > given.settings.placement.reservation_seconds:
                self.remember(holder.key, reserved_at=None, reservation_ended=given.mono)
            else:
                kept.append(holder)
        return kept, ordered

    def next_holders(self, starving: list[QueuedJob], snapshot: Snapshot, places: int) -> list[Key]:
        """Of the starving jobs that can fit at all, the `places` whose last reservation is the oldest (never
        reserved first), then queue order, in that turn: reservations rotate."""
        if places <= 0:
            return []
        ranked: list[tuple[float, int, Key]] = []
        for index, candidate in enumerate(starving):
            if candidate.key not in self.given.jobs or \
                    self.fits_empty(candidate.key, candidate.request, snapshot) is not None:
                continue
            ended = self.recall(candidate.key).reservation_ended
            ranked.append((ended if ended is not None else float("-inf"), index, candidate.key))
        return [key for *_, key in sorted(ranked)[:places]]

    def may_gain(self, candidate: QueuedJob, snapshot: Snapshot, others_hold: frozenset[str]) -> bool:
        """Whether a solve after capacity was freed could place the gang or lead to making room for it: the
        free GPUs off other jobs' reservations could hold it by count, or by total for defragmentation, or
        a lower-priority gang is placed that preemption could evict."""
        request = candidate.request
        return queue.has_room(snapshot, request, others_hold) or \
            (self.given.settings.defragmentation.enabled and fits_by_gpus(snapshot, request)) or \
            self.given.room.might_preempt_for(candidate.priority)


def plan_pass(given: PassInput, clock: Callable[[], float] = lambda: 0.0) -> Generator[None, None, PassPlan]:
    """Decide one pass (a generator: it yields between solves; `clock` times each solve for the metrics)."""
    settings, snapshot, room = given.settings, given.snapshot, given.room
    work = _Pass(given)
    plan = PassPlan()
    kept, plan.released, plan.expired = expire(room.holds, given.jobs, given.mono, settings.preemption.hold_seconds,
                                               snapshot.has_node)
    room.holds.clear()
    room.holds.update(kept)
    spares = spare_nodes(snapshot, settings.spares.per_tor)
    current = snapshot
    small_jobs = SmallJobs(snapshot, settings.placement.small_job_gpus)
    holding, ordered = work.holders(queue.order(given.waiting, given.now, small_jobs.is_small,
                                                settings.placement.small_job_ahead_seconds))

    def never_its(key: Key) -> frozenset[str]:
        """Nodes a gang can never land on now: held for another gang's preemption, move or replacement, and
        the hot spares unless it backfills them. A reservation is never made of these."""
        job = given.jobs.get(key)
        backfills = job is not None and job.spec is not None and job.spec.preemption.backfill_spares
        return held_for_others(room.holds, key) | (frozenset() if backfills else spares)

    held: dict[Key, frozenset[str]] = {}  # holder -> its nodes, disjoint, in queue order
    for holder in holding:
        off = _union(held.values()) | never_its(holder.key)
        sticky = work.recall(holder.key).reserved if work.recall(holder.key).backfilled_into else frozenset()
        if sticky and not sticky & off and still_holds(current, holder.request, sticky):
            held[holder.key] = sticky
        elif nodes := queue.reserved_nodes(holder, current.without_nodes(off)):
            held[holder.key] = nodes
    starvation = settings.placement.starvation_seconds
    starving = [j for j in ordered if j.key not in held and queue.starving(j, given.now, starvation)]
    turn = work.next_holders(starving, snapshot, settings.placement.max_reservations - len(held))
    ordered, next_holders = queue.in_turn(ordered, turn), frozenset(turn)
    pods: list[PodInfo] | None = None  # existing and placed pods, read only for inter-pod rules

    def decide_here(view: Snapshot, request: GangRequest) -> Decision:
        return decide(view, request, pods or ())

    room = replace(room, decide=decide_here)
    backfill = Backfill(given.occupants, given.now, settings.placement.resync_seconds,
                        settings.placement.backfill_trust)
    requests = {j.key: j.request for j in given.waiting}
    for candidate in ordered:
        if given.over_budget():  # the rest waits for the next pass (the loop turns again)
            plan.budget_spent = True
            break
        job = given.jobs.get(candidate.key)
        if job is None:
            continue
        memory = work.recall(candidate.key)
        may_hold = candidate.key in next_holders and len(held) < settings.placement.max_reservations
        # A job whose reservation ran out on this pass is solved whatever else: its Placed reason must leave
        # Reserving, or the next pass takes it for a holder again and restarts its box.
        box_ended = memory.reservation_ended == given.mono
        # Reservations this job ends before (by its declared limit) are open to it: backfill.
        open_to = backfill.open_to(job, held, requests, current) if held else {}
        others_hold = _union(nodes - open_to[key][1] if key in open_to else nodes
                             for key, nodes in held.items() if key != candidate.key)
        small = frozenset[str]()
        if held and small_jobs.is_small(candidate.request):  # off by default: nothing to read per candidate
            scheduled = {k for k in held if work.recall(k).backfilled_into} | {b.holder for b in backfill.backfilled}
            small = small_jobs.open_to(candidate.request, candidate.key, held, scheduled,
                                       partial(backfill.would_delay, job, requests, current))
        closed = others_hold - small  # the reserved nodes this job may not use
        gains = partial(work.may_gain, candidate, current, closed)
        if not queue.worth_solving(memory.failure, given.freed, job.generation, given.now,
                                   settings.placement.retry_seconds, gains) and not may_hold and not box_ended:
            continue
        elsewhere = candidate.avoid | never_its(candidate.key)
        view = current.without_nodes(closed | elsewhere)
        if pods is None and has_inter_pod_rules(candidate.request.pod_spec):
            pods = [*given.pod_infos(), *(p for _, earlier in plan.placed for p in placed_pods(earlier))]
        started = clock()
        try:
            decision = decide_here(view, candidate.request)
        except Exception as e:  # one job's trouble is that job's: the pass goes on
            plan.failed.append(Failed(candidate.key, "solve", e))
            continue
        finally:
            plan.solves.append(clock() - started)
        yield  # between solves: watch events and probes keep flowing
        if decision.placement is not None:
            current = taken(current, decision)
            backfill.placed(job, decision, held, open_to)
            if small:  # landed on nodes lent as a small job's: its Event names their holders
                lent = small - _union(held[key] for key in open_to if key in held)
                landed = {node for node, _ in decision.placement.allocations} & lent
                plan.lent.extend(Lent(candidate.key, key) for key, nodes in held.items() if nodes & landed)
            if pods is not None:
                pods.extend(placed_pods(decision))
            plan.placed.append((candidate.key, decision))
            plan.priorities[candidate.key] = candidate.priority
            work.remember(candidate.key, failure=None)
            room.holds.pop(candidate.key, None)  # its hold served its purpose
            if held.pop(candidate.key, None) is not None:  # the reservation served its purpose
                work.remember(candidate.key, reserved_at=None)
            continue
        work.remember(candidate.key, failure=Failure(given.freed, job.generation, given.now))
        never = work.fits_empty(candidate.key, candidate.request, snapshot)
        if never is not None:
            decision = Decision(decision.request, None, f"can never fit this cluster, even with nothing else "
                                f"on it: {never.reason}")
        elif candidate.avoid:
            decision = Decision(decision.request, None, f"{decision.reason}; avoiding nodes "
                                f"{', '.join(sorted(candidate.avoid))} after a bind failure")
        reason = PlacedReason.UNSCHEDULABLE
        making: Room | None = None
        if never is None:
            try:
                # Making room (evictions, moves) stays off every reservation: small jobs borrow free capacity only.
                room_view = current.without_nodes(others_hold | elsewhere) if small else view
                making = make_room(room, job, candidate, room_view)
            except Exception as e:  # one job's trouble is that job's: the pass goes on
                plan.failed.append(Failed(candidate.key, "preempt", e))
            if making is not None:
                reason = making.reason
                _started(plan, room, candidate.key, making, given.mono, settings.preemption.hold_seconds)
        if may_hold and never is None and making is None:
            usable = current.without_nodes(_union(held.values()) | never_its(candidate.key))
            nodes = queue.reserved_nodes(candidate, usable)
            if nodes:  # else what the other holders keep leaves it nothing to wait for yet
                held[candidate.key] = nodes
                work.remember(candidate.key, reserved_at=given.mono)
        if candidate.key in held and making is None:
            reason = PlacedReason.RESERVING
        plan.unplaced.append(Unplaced(candidate.key, decision, reason, making))
    # The pass's placements can move the spare designation (a backfill took the spare a TOR kept, so another of
    # its free nodes is the spare now): a reservation is re-chosen off the spares the next pass starts with.
    moved = spare_nodes(current, settings.spares.per_tor) - spares if plan.placed and held else frozenset()
    spares |= moved
    waiting = {j.key: j for j in given.waiting}
    for key in [k for k, nodes in held.items() if nodes & moved and k in waiting]:
        rest = _union(nodes for k, nodes in held.items() if k != key)
        if nodes := queue.reserved_nodes(waiting[key], current.without_nodes(rest | never_its(key))):
            held[key] = nodes
        else:
            del held[key]
    for key in {b.holder for b in backfill.backfilled if held.get(b.holder) == b.nodes}:  # not re-chosen since
        work.remember(key, backfilled_into=True)
    for key in set(held) | {k for k, m in given.memory.items() if m.reserved}:
        if work.recall(key).reserved != held.get(key, frozenset()):
            work.remember(key, reserved=held.get(key, frozenset()))
        if key not in held and work.recall(key).backfilled_into:
            work.remember(key, backfilled_into=False)
    plan.memory = {key: work.memory[key] for key in work.changed}
    plan.holds = dict(room.holds)
    plan.moves_started = list(room.moves_started)
    plan.after = current
    plan.backfilled = backfill.backfilled
    return plan


def _started(plan: PassPlan, room: RoomView, key: Key, making: Room, mono: float, hold_seconds: float) -> None:
    """What making room starts holds from now on (later gangs of the pass keep off it)."""
    if making.hold is not None:
        room.holds[key] = making.hold
    elif making.preemption is not None:
        # Held: where it will land, not the whole domain (nothing else waits for no reason).
        landing = frozenset(r.node for r in making.preemption.placement.replicas)
        room.holds[key] = Hold(landing, tuple(v.key for v in making.preemption.victims), mono + hold_seconds)
    elif making.migration is not None:
        moves = making.migration
        landing = frozenset(r.node for r in moves.placement.replicas)
        room.holds[key] = Hold(landing, tuple(m.key for m in moves.moves), mono + hold_seconds,
                               reason=PlacedReason.DEFRAGMENTING)
        for move in moves.moves:
            mover = room.jobs.get(parse_key(move.key))
            if mover is None:
                continue
            pending = PendingMove(frozenset(move.leaves), key, mover.restart_count, mono + hold_seconds)
            room.moves[mover.key] = plan.moves[mover.key] = pending
            room.moves_started.append(mono)


def drive(plan: Generator[None, None, PassPlan]) -> PassPlan:
    """Run a pass to its end without yielding (the simulators, tests)."""
    while True:
        try:
            next(plan)
        except StopIteration as done:
            return done.value
