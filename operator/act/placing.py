"""One pass over the queued jobs: solve each in queue order on the snapshot (the capacity of those
placed earlier in the pass taken), hold the nodes a starving job waits for, record each placement in
status and send that gang to the release line as soon as its write returns — the writes of smaller
gangs sent first, so they mostly join first (their capacity is taken already, so the order only decides
who binds first), behind every gang of earlier passes. Unplaced jobs get Placed=False with the binding
constraint, written only when that constraint changes (the queue rule itself is decide/queue.py)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Iterable
from functools import partial

from railyard.operator.act.context import Context
from railyard.operator.act.errors import JobErrors
from railyard.operator.act.events import Events
from railyard.operator.act.materialiser import Materialiser
from railyard.operator.act.migration import Migrations
from railyard.operator.act.preemption import Preemptions
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import ConditionType, PlacedReason
from railyard.operator.decide import queue
from railyard.operator.decide import status as transitions
from railyard.operator.decide.queue import QueuedJob
from railyard.operator.decide.spares import spare_nodes, tors_short
from railyard.operator.kube.client import Fenced
from railyard.topology.affinity import PodInfo, has_inter_pod_rules
from railyard.topology.decision import decide, never_fits, placed_pods, taken
from railyard.topology.defrag import fits_by_gpus
from railyard.topology.model import Snapshot
from railyard.topology.request import GangRequest
from railyard.topology.solver import Decision

log = logging.getLogger(__name__)


def stable_key(message: str) -> str:
    """The binding constraint of an Unschedulable message without its live counts and without the
    tally of excluded nodes (context, which churns while nodes join or heartbeats lag): the
    condition and its Event change when the constraint changes, not every time a count moves."""
    return re.sub(r"\d+", "#", message.split("; excluded nodes:")[0])


def _union(sets: Iterable[frozenset[str]]) -> frozenset[str]:
    return frozenset().union(*sets)


def queued(job: Job, request: GangRequest, now: float, priority: int) -> QueuedJob:
    """`priority`: its PriorityClass's value (decide/priority.resolve)."""
    avoid = frozenset(a.node for a in job.status.avoid_nodes if a.until is not None and a.until.timestamp() > now)
    since = job.queued_since
    return QueuedJob(job.key, priority, since.timestamp() if since is not None else now, request, avoid)


class QueuePass:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, materialiser: Materialiser,
                 errors: JobErrors, preemptions: Preemptions, migrations: Migrations) -> None:
        self.ctx = ctx
        self.preemptions = preemptions
        self.migrations = migrations
        self.writer = writer
        self.events = events
        self.materialiser = materialiser
        self.errors = errors

    def _holders(self, ordered: list[QueuedJob], mono: float) -> tuple[list[QueuedJob], list[QueuedJob]]:
        """The jobs holding reservations (they go first), but for those whose time box ran out: they
        give theirs up, and other starving jobs may take it."""
        state = self.ctx.state

        def reserving(key: Key) -> bool:
            job = state.jobs.get(key)
            placed = job.condition(ConditionType.PLACED) if job is not None else None
            return placed is not None and placed.reason == PlacedReason.RESERVING

        holding, ordered = queue.holders_first(ordered, reserving)
        kept = []
        for holder in holding:
            memory = self.ctx.memories.recall(state.jobs[holder.key])
            if memory.reserved_at is None:
                memory.reserved_at = mono  # held before this operator started: its box starts now
            if mono - memory.reserved_at > self.ctx.settings.placement.reservation_seconds:
                memory.reserved_at, memory.reservation_ended = None, mono
            else:
                kept.append(holder)
        return kept, ordered

    def _may_gain(self, candidate: QueuedJob, snapshot: Snapshot, others_hold: frozenset[str]) -> bool:
        """Whether a solve after capacity was freed could place the gang or lead to making room for it:
        the free GPUs off other jobs' reservations could hold it by count, or by total for
        defragmentation, or a lower-priority gang is placed that preemption could evict."""
        request = candidate.request
        return queue.has_room(snapshot, request, others_hold) or \
            (self.ctx.settings.placement.defragmentation and fits_by_gpus(snapshot, request)) or \
            self.preemptions.might_preempt_for(candidate.priority)

    def _fits_empty(self, job: Job, request: GangRequest, snapshot: Snapshot) -> Decision | None:
        """None when the gang fits the cluster with nothing else on it; else the empty cluster's reason."""
        memory = self.ctx.memories.recall(job)
        epoch = self.ctx.state.node_epoch
        if memory.fits_empty is None or memory.fits_empty[0] != epoch:
            memory.fits_empty = (epoch, never_fits(snapshot, request))
        return memory.fits_empty[1]

    def _next_holders(self, starving: list[QueuedJob], snapshot: Snapshot, places: int) -> list[Key]:
        """Of the starving jobs that can fit at all, the `places` whose last reservation is the oldest
        (never reserved first), then queue order, in that turn: reservations rotate."""
        if places <= 0:
            return []
        ranked: list[tuple[float, int, Key]] = []
        for index, candidate in enumerate(starving):
            job = self.ctx.state.jobs.get(candidate.key)
            if job is None or self._fits_empty(job, candidate.request, snapshot) is not None:
                continue
            memory = self.ctx.memories.recall(job)
            ranked.append((memory.reservation_ended if memory.reservation_ended is not None else float("-inf"),
                           index, candidate.key))
        return [key for *_, key in sorted(ranked)[:places]]

    async def run(self, waiting: list[QueuedJob], snapshot: Snapshot, now: float) -> int:
        """Place what fits; the number of gangs placed."""
        state, settings = self.ctx.state, self.ctx.settings.placement
        mono = self.ctx.clock.monotonic()
        await self.preemptions.expire(mono)
        spares = spare_nodes(snapshot, settings.spares_per_tor)
        current = snapshot
        placed: list[tuple[Job, Decision]] = []
        unplaced: list[tuple[Job, Decision, PlacedReason]] = []
        holding, ordered = self._holders(queue.order(waiting), mono)
        held: dict[Key, frozenset[str]] = {}  # holder -> its nodes, disjoint, in queue order
        for holder in holding:
            if nodes := queue.reserved_nodes(holder, current.without_nodes(_union(held.values()))):
                held[holder.key] = nodes
        starving = [j for j in ordered if j.key not in held and queue.starving(j, now, settings.starvation_seconds)]
        turn = self._next_holders(starving, snapshot, settings.max_reservations - len(held))
        ordered, next_holders = queue.in_turn(ordered, turn), frozenset(turn)
        pods: list[PodInfo] | None = None  # existing and placed pods, read only for inter-pod rules
        began = time.perf_counter()
        deadline = began + settings.solve_budget_seconds
        for candidate in ordered:
            if time.perf_counter() > deadline:  # the rest waits for the next pass (the loop turns again)
                self.writer.wake()
                break
            job = state.jobs.get(candidate.key)
            if job is None:
                continue
            memory = self.ctx.memories.recall(job)
            may_hold = candidate.key in next_holders and len(held) < settings.max_reservations
            # A job whose reservation ran out on this pass is solved whatever else: its Placed reason must
            # leave Reserving, or the next pass takes it for a holder again and restarts its box.
            box_ended = memory.reservation_ended == mono
            others_hold = _union(nodes for key, nodes in held.items() if key != candidate.key)
            if not queue.worth_solving(memory.failure, state.usage.freed, job.generation, now, settings.retry_seconds,
                                       partial(self._may_gain, candidate, current, others_hold)) \
                    and not may_hold and not box_ended:
                continue
            view = current.without_nodes(others_hold | candidate.avoid | self.preemptions.held_for_others(candidate.key)
                                         | (frozenset() if job.spec is not None and job.spec.preemption.backfill_spares
                                            else spares))
            if pods is None and has_inter_pod_rules(candidate.request.pod_spec):
                pods = [*state.pod_infos(), *(p for _, earlier in placed for p in placed_pods(earlier))]
            started = time.perf_counter()
            try:
                decision = decide(view, candidate.request, pods or ())
            except Exception as e:  # one job's trouble is that job's: the pass goes on
                await self.errors.report(job, "solve", e)
                continue
            finally:
                metrics.SOLVE_SECONDS.observe(time.perf_counter() - started)
            await asyncio.sleep(0)  # yield between solves: watch events and probes keep flowing
            job = state.jobs.get(candidate.key)
            if job is None:
                continue
            if decision.placement is not None:
                current = taken(current, decision)
                if pods is not None:
                    pods.extend(placed_pods(decision))
                placed.append((job, decision))
                memory.failure = None
                self.preemptions.placed(candidate.key)
                if held.pop(candidate.key, None) is not None:  # the reservation served its purpose
                    memory.reserved_at = None
                continue
            memory.failure = queue.Failure(state.usage.freed, job.generation, now)
            never = self._fits_empty(job, candidate.request, snapshot)
            if never is not None:
                decision = Decision(decision.request, None, f"can never fit this cluster, even with nothing else "
                                    f"on it: {never.reason}")
            elif candidate.avoid:
                decision = Decision(decision.request, None, f"{decision.reason}; avoiding nodes "
                                    f"{', '.join(sorted(candidate.avoid))} after a bind failure")
            reason = PlacedReason.UNSCHEDULABLE
            if never is None:
                making_room = await self._make_room(job, candidate, view, now)
                if making_room is not None:
                    reason, how = making_room
                    decision = Decision(decision.request, None, f"{decision.reason}; {how}")
            making = reason in (PlacedReason.PREEMPTING, PlacedReason.DEFRAGMENTING)
            if may_hold and never is None and not making:
                nodes = queue.reserved_nodes(candidate, current.without_nodes(_union(held.values())))
                if nodes:  # else what the other holders keep leaves it nothing to wait for yet
                    held[candidate.key], memory.reserved_at = nodes, mono
            if candidate.key in held and not making:
                reason = PlacedReason.RESERVING
            unplaced.append((job, decision, reason))
        solved = time.perf_counter()
        # Each placement is recorded (the next pass's snapshot holds it) and joins the release line as
        # soon as its own write returns, smaller gangs first: the first gangs are being created while
        # the pass's later writes are in flight (a burst's 137 records took 1.7 s, all waited for before).
        # The unplaced jobs' conditions are written behind them.
        # Every write is waited for before the pass ends, whatever one of them raised: a pass that ended
        # with a record still in flight would let the next one solve onto GPUs it is about to hold.
        by_size = sorted(placed, key=lambda jd: len(jd[1].placement.replicas) if jd[1].placement else 0)
        outcomes = await asyncio.gather(
            *(self._record_and_release(j, d) for j, d in by_size),
            *(self.writer.guard(j.key, self._mark_unplaced(j, d, r)) for j, d, r in unplaced), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:  # leadership lost first: it ends the pass (writer.guard's rule)
            raise next((e for e in errors if isinstance(e, Fenced)), errors[0])
        metrics.QUEUE_LENGTH.set(len(waiting) - len(placed))
        if placed:
            log.info("pass: %d placed, %d not: solved in %.2f s, written in %.2f s", len(placed), len(unplaced),
                     solved - began, time.perf_counter() - solved)
        metrics.TORS_WITHOUT_SPARE.set(tors_short(current, settings.spares_per_tor, self._backfilled()))
        return len(placed)

    def _backfilled(self) -> set[str]:
        """Nodes lent to jobs that backfill the hot spares (they give them back on demand)."""
        if self.ctx.settings.placement.spares_per_tor <= 0:
            return set()
        return {r.node for job in self.ctx.state.jobs.values() if job.placement is not None and job.spec is not None
                and job.spec.preemption.backfill_spares for r in job.placement.ranks}

    async def _record_and_release(self, job: Job, decision: Decision) -> None:
        """Record the placement; once it is stored, the gang joins the release line."""
        await self.writer.guard(job.key, self._record(job, decision))
        recorded = self.ctx.state.jobs.get(job.key)
        if recorded is not None and recorded.placement is not None:
            self.materialiser.enqueue(recorded)
            await self.writer.guard(job.key, self.errors.cleared(recorded))

    async def _record(self, job: Job, decision: Decision) -> None:
        assert decision.placement is not None
        patch = transitions.placing(job, decision.placement, uuid.uuid4().hex[:10], utc(self.ctx.clock.time()))
        await self.writer.patch(job, patch)

    async def _make_room(self, job: Job, candidate: QueuedJob, view: Snapshot,
                         now: float) -> tuple[PlacedReason, str] | None:
        """How room is being made for the gang (its Placed reason and message): other gangs moved out of
        one domain (defragmentation, where the gang fits by free GPUs), else lower-priority gangs
        evicted (preemption); None: neither."""
        hold = self.preemptions.holding(candidate.key)
        if hold is not None:
            return hold.reason, (
                f"making room: {', '.join(hold.victims)} leaving; the nodes are held for it" if hold.victims else
                f"waiting for {len(hold.nodes)} nodes other gangs are leaving (held for it)")
        try:
            moves = self.migrations.plan(job, candidate, view, now)
            if moves is not None:
                return PlacedReason.DEFRAGMENTING, await self.migrations.start(job, moves)
            plan = self.preemptions.plan(job, candidate, view, now)
        except Exception as e:  # one job's trouble is that job's: the pass goes on
            await self.errors.report(job, "preempt", e)
            return None
        return (PlacedReason.PREEMPTING, await self.preemptions.start(job, plan)) if plan is not None else None

    async def _mark_unplaced(self, job: Job, decision: Decision, reason: PlacedReason) -> None:
        reserving = reason == PlacedReason.RESERVING
        message = decision.reason or "no placement"
        if reserving:
            message += "; waited past the starvation limit: the nodes it waits for are reserved"
        previous = job.condition(ConditionType.PLACED)
        if previous is not None and previous.reason == reason and \
                stable_key(previous.message) == stable_key(message):
            return  # same binding constraint, only counts moved: no write, no Event
        metrics.PLACEMENT_FAILURES.labels(reason).inc()
        if await self.writer.patch(job, transitions.unplaced(job, reason, message,
                                                             utc(self.ctx.clock.time()))) is not None:
            await self.events.warning(job, reason, message, key=stable_key(message))

