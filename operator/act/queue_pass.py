"""Carries one queue pass out: gathers what decide/pass_plan.plan_pass reads (the snapshot, the waiting jobs,
the memories, the holds and moves under way), runs it, then acts on its plan — records each placement in
status and sends that gang to the release line as soon as its write returns (the writes of smaller gangs
sent first, so they mostly join first: their capacity is taken already, so the order only decides who binds
first), marks victims and tells movers for the gangs room is made for, and writes Placed=False with the
binding constraint for the rest (only when that constraint changes)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from functools import partial

from railyard.operator.act.actor_context import Context
from railyard.operator.act.errors import JobErrors
from railyard.operator.act.events import Events
from railyard.operator.act.materialiser import CreateRefused, Materialiser
from railyard.operator.act.moves import Moves
from railyard.operator.act.preemptions import Victims
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import ConditionType, EventReason, PlacedReason
from railyard.operator.cache.memory import cooling, holds, moves
from railyard.operator.cache.state import ClusterState
from railyard.operator.cache.state_views import gpu_holders, leaving, pod_infos
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.adopted_gangs import rank_order
from railyard.operator.decide.backfill import NEVER, backfill_message, expected_end
from railyard.operator.decide.pass_plan import PassInput, PassPlan, Unplaced, plan_pass
from railyard.operator.decide.preemption_rules import parse_key
from railyard.operator.decide.queue import QueuedJob
from railyard.operator.decide.room import Room, RoomView, moves_this_hour_seen
from railyard.operator.decide.small_jobs import lent_message
from railyard.operator.decide.spares import tors_short
from railyard.operator.kube.client import Fenced
from railyard.topology.api.timestamps import epoch
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.placement import Decision

log = logging.getLogger(__name__)


def occupants(state: ClusterState, pass_seconds: float) -> dict[str, list[tuple[float, int]]]:
    """Per node, when each holder of GPUs there is expected gone (decide/backfill.py): a Terminating pod by its
    deletionTimestamp (its grace period's end), anything else by its job's declared limit, or never."""
    out: dict[str, list[tuple[float, int]]] = {}
    for node, gpus, key, leaving_by in gpu_holders(state):
        if leaving_by is not None:
            end = epoch(leaving_by, NEVER)
        else:
            end = expected_end(state.jobs.get(key) if key is not None else None, pass_seconds)
        out.setdefault(node, []).append((end, gpus))
    return out


class QueuePass:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, materialiser: Materialiser,
                 errors: JobErrors, victims: Victims, moves: Moves) -> None:
        self.ctx = ctx
        self.victims = victims
        self.moves = moves
        self.writer = writer
        self.events = events
        self.materialiser = materialiser
        self.errors = errors

    def given(self, waiting: list[QueuedJob], snapshot: Snapshot, now: float) -> PassInput:
        """What the pass decides on: the state's values now (the jobs' mapping copied: watch events land
        between solves)."""
        state, memories = self.ctx.state, self.ctx.memories
        jobs = dict(state.jobs)
        mono = self.ctx.clock.monotonic()
        settings = self.ctx.settings
        saved: dict[tuple[str, str], float | None] = {}

        def last_saved(job: Job) -> float | None:
            if job.key not in saved:
                saved[job.key] = self.victims.checkpoints.last_saved(job)
            return saved[job.key]

        started = moves_this_hour_seen(memories.moves_started, jobs, now, mono)
        room = RoomView(jobs, dict(state.priority_classes), holds(memories, jobs), cooling(memories, jobs),
                        moves(memories, jobs), started, partial(leaving, state), last_saved, settings,
                        now, mono, decide=lambda s, r: Decision(r, None, "no decision function"))
        memory = {key: m.queue_memory() for key, job in jobs.items() if (m := memories.peek(job)) is not None}
        reserving = frozenset(key for key, job in jobs.items()
                              if (placed := job.condition(ConditionType.PLACED)) is not None
                              and placed.reason == PlacedReason.RESERVING)
        deadline = time.perf_counter() + settings.placement.solve_budget_seconds
        return PassInput(snapshot, tuple(waiting), jobs, memory, room, reserving, partial(pod_infos, state),
                         state.usage.freed, state.node_epoch, now, mono, settings,
                         over_budget=lambda: time.perf_counter() > deadline,
                         occupants=partial(occupants, state, settings.placement.resync_seconds))

    async def run(self, waiting: list[QueuedJob], snapshot: Snapshot, now: float) -> int:
        """Place what fits; the number of gangs placed."""
        given = self.given(waiting, snapshot, now)
        began = time.perf_counter()
        planning = plan_pass(given, time.perf_counter)
        while True:
            try:
                next(planning)
            except StopIteration as done:
                plan: PassPlan = done.value
                break
            await asyncio.sleep(0)  # yield between solves: watch events and probes keep flowing
        solved = time.perf_counter()
        for seconds in plan.solves:
            metrics.SOLVE_SECONDS.observe(seconds)
        if plan.budget_spent:
            self.writer.wake()
        await self._remember(plan)
        for failed in plan.failed:
            job = self.ctx.state.jobs.get(failed.key)
            if job is not None:
                await self.errors.report(job, failed.stage, failed.error)
        placed = [(job, decision, plan.priorities[key]) for key, decision in plan.placed
                  if (job := self.ctx.state.jobs.get(key)) is not None]
        unplaced = [(job, entry) for entry in plan.unplaced if (job := self.ctx.state.jobs.get(entry.key)) is not None]
        making = [self._make_room(job, entry) for job, entry in unplaced if entry.room is not None]
        said = dict(zip([entry.key for _, entry in unplaced if entry.room is not None], await asyncio.gather(*making),
                        strict=True))
        # Each placement is recorded (the next pass's snapshot holds it) and joins the release line as soon
        # as its own write returns, smaller gangs first: the first gangs are being created while the pass's
        # later writes are in flight (a burst's 137 records took 1.7 s, all waited for before). The unplaced
        # jobs' conditions are written behind them. Every write is waited for before the pass ends, whatever
        # one of them raised: a pass that ended with a record still in flight would let the next one solve
        # onto GPUs it is about to hold.
        by_size = sorted(placed, key=lambda jd: len(jd[1].placement.replicas) if jd[1].placement else 0)
        outcomes = await asyncio.gather(
            *(self._record_and_release(j, d, priority, now) for j, d, priority in by_size),
            *(self.writer.guard(j.key, self._mark_unplaced(j, e, said.get(e.key))) for j, e in unplaced),
            return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:  # leadership lost first: it ends the pass (writer.guard's rule)
            raise next((e for e in errors if isinstance(e, Fenced)), errors[0])
        # Jobs placed on others' reserved nodes: by a declared limit, or as small jobs (the holder may wait).
        on_reserved = [*((b.job, EventReason.BACKFILLED, backfill_message(b)) for b in plan.backfilled),
                       *((lent.job, EventReason.LENT_RESERVED_NODES,
                          lent_message(lent, self.ctx.settings.placement.small_job_gpus)) for lent in plan.lent)]
        for key, reason, message in on_reserved:
            if (job := self.ctx.state.jobs.get(key)) is not None and job.placement is not None:
                await self.events.normal(job, reason, message)
        metrics.QUEUE_LENGTH.set(len(waiting) - len(placed))
        if placed:
            log.info("pass: %d placed, %d not: solved in %.2f s, written in %.2f s", len(placed), len(unplaced),
                     solved - began, time.perf_counter() - solved)
        settings = self.ctx.settings
        metrics.TORS_WITHOUT_SPARE.set(tors_short(plan.after or snapshot, settings.spares.per_tor, self._backfilled()))
        return len(placed)

    async def _remember(self, plan: PassPlan) -> None:
        """The plan's values into the jobs' memories: the queue's, every hold and the moves started."""
        memories, jobs = self.ctx.memories, self.ctx.state.jobs
        for key, value in plan.memory.items():
            if (job := jobs.get(key)) is not None:
                memories.recall(job).remember_queue(value)
        for key, job in jobs.items():
            memory = memories.peek(job)
            hold = plan.holds.get(key)
            if memory is not None and memory.hold is not None and hold is None:
                memory.hold = None
            elif hold is not None:
                memories.recall(job).hold = hold
        for key, move in plan.moves.items():
            if (job := jobs.get(key)) is not None:
                memories.recall(job).move = move
        memories.moves_started = plan.moves_started
        await self.victims.timed_out(plan.expired)

    def _backfilled(self) -> set[str]:
        """Nodes lent to jobs that backfill the hot spares (they give them back on demand)."""
        if self.ctx.settings.spares.per_tor <= 0:
            return set()
        return {r.node for job in self.ctx.state.jobs.values() if job.placement is not None and job.spec is not None
                and job.spec.preemption.backfill_spares for r in job.placement.ranks}

    async def _make_room(self, job: Job, entry: Unplaced) -> str | CreateRefused:
        """Start what making room for the gang needs (victims marked, movers told); its Placed message's tail.
        Nobody is evicted or moved for a gang whose own pods the API server would refuse (its quota, its
        PriorityClass, an admission webhook: a dry run says): the refusal is what it waits with."""
        making = entry.room
        assert making is not None
        try:
            plan = making.preemption or making.migration
            if plan is not None and (refused := await self.materialiser.refusal(job, plan.placement)) is not None:
                await self._call_off(job, making, refused.message)
                return refused
            if making.preemption is not None:
                return await self.victims.start(job, making.preemption)
            if making.migration is not None:
                await self.moves.start(job, making.migration, making.message)
        except Fenced:
            raise
        except Exception as e:  # one job's trouble is that job's: the pass goes on
            # A plan that could not be started holds nothing (the next pass plans again, counting any victim
            # already marked as leaving for it).
            await self._call_off(job, making, f"making room failed: {e}")
            await self.errors.report(job, "preempt", e)
        return making.message

    async def _call_off(self, job: Job, making: Room, why: str) -> None:
        """The room the pass planned is not made: no hold for the gang, no mover asked to leave."""
        self.ctx.memories.recall(job).hold = None
        if making.migration is not None:
            for move in making.migration.moves:
                mover = self.ctx.state.jobs.get(parse_key(move.key))
                if mover is not None:
                    await self.moves.no_room(mover, f"{job.namespace}/{job.name}'s pods would be refused")

    async def _record_and_release(self, job: Job, decision: Decision, priority: int, now: float) -> None:
        """Record the placement; once it is stored, the gang joins the release line."""
        await self.writer.guard(job.key, self._record(job, decision, priority, now))
        recorded = self.ctx.state.jobs.get(job.key)
        if recorded is not None and recorded.placement is not None:
            self.materialiser.enqueue(recorded)
            await self.writer.guard(job.key, self.errors.cleared(recorded))

    async def _record(self, job: Job, decision: Decision, priority: int, now: float) -> None:
        """Write the placement down, at the pass's time: its time limit runs from when the pass decided (backfill
        checked the end it would have then)."""
        assert decision.placement is not None
        adopted = None
        if job.spec is not None and job.spec.adopt is not None:  # the owner's pods, by rank
            ordered = rank_order(job, self.ctx.state.group_pods(job.namespace, job.spec.adopt.group))
            if ordered is None:
                return  # a pod went away since the pass began: the next pass queues it again
            adopted = [(p.name, p.uid) for p in ordered]
        patch = transitions.placing(job, decision.placement, uuid.uuid4().hex[:10], utc(now), priority, adopted)
        await self.writer.patch(job, patch)

    async def _mark_unplaced(self, job: Job, entry: Unplaced, making_room: str | CreateRefused | None) -> None:
        if isinstance(making_room, CreateRefused):
            reason, message = making_room.reason, making_room.message
        else:
            reason, message = entry.reason, entry.message(making_room)
        patch = transitions.unplaced(job, reason, message, utc(self.ctx.clock.time()))
        if patch is None:
            return
        metrics.PLACEMENT_FAILURES.labels(reason).inc()
        if await self.writer.patch(job, patch) is not None:
            await self.events.warning(job, reason, message, key=transitions.constraint_key(message))

