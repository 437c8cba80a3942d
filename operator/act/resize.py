"""Resizes a running elastic gang whose size differs from spec.replicas, as decide/resize_plan.py says: once
the ranks saved a step (when they report and the elastic policy asks for it), the gang restarts as a new
attempt of the new size; a grow that found no room says so (BelowDesired)."""

from __future__ import annotations

import asyncio
import time

from railyard.operator.act.actor_context import Context
from railyard.operator.act.attempts import Attempts
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.events import Events
from railyard.operator.act.recovery import Recovery
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import ConditionType, EventReason, RestartReason
from railyard.operator.cache.memory import holds, reservations
from railyard.operator.cache.state_views import node_models
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.actions import Resize
from railyard.operator.decide.holds import held_for_others
from railyard.operator.decide.resize_plan import GrowAttempt, ResizeKind, growth_avoids, plan_resize
from railyard.operator.decide.spares import spare_nodes


class Resizer:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, checkpoints: Checkpoints,
                 attempts: Attempts, recovery: Recovery) -> None:
        self.ctx = ctx
        self.writer = writer
        self.events = events
        self.checkpoints = checkpoints
        self.attempts = attempts
        self.recovery = recovery

    async def resize(self, job: Job, action: Resize) -> None:
        async with self.recovery.choosing:  # never solved on the same state as a restart of this pass
            await self._resize(job, action)

    async def _resize(self, job: Job, action: Resize) -> None:
        state = self.ctx.state
        memory = self.ctx.memories.recall(job)
        now, mono = self.ctx.clock.time(), self.ctx.clock.monotonic()
        started = time.perf_counter()
        snapshot = state.snapshot()
        avoid = growth_avoids(job, held_for_others(holds(self.ctx.memories, state.jobs), job.key),
                              reservations(self.ctx.memories, state.jobs),
                              spare_nodes(snapshot, self.ctx.settings.spares.per_tor))
        plan = plan_resize(job, action, snapshot, node_models(self.ctx.state), avoid, memory.grow,
                           state.usage.freed, mono, now, self._attempt_began(job, now),
                           self.ctx.settings.placement.retry_seconds)
        if plan.kind is ResizeKind.NO_ROOM:
            memory.grow = GrowAttempt(state.usage.freed, mono)
            patch = transitions.no_room_to_grow(job, plan.message, utc(now))
            if patch is not None:
                await self.writer.patch(job, patch)
            return
        if plan.kind is ResizeKind.NONE:
            return
        if plan.reason == RestartReason.SCALE_UP:
            memory.grow = None
        metrics.RESIZE_SECONDS.observe(time.perf_counter() - started)
        policy = job.spec.elastic_policy if job.spec is not None else None
        if policy is not None and not self._checkpoint_first(job, policy.checkpoint_before_resize,
                                                             policy.checkpoint_timeout_seconds):
            return
        assert plan.reason is not None
        moved: dict[str, object] = {"moved_ranks": plan.moved}
        if await self.attempts.record(job, plan.reason, plan.message, plan.replicas, moved) is None:
            return
        metrics.RESTARTS.labels(plan.reason).inc()
        await self.events.normal(job, EventReason.RESIZED, plan.message, key=str(job.restart_count + 1))
        old = tuple(p.name for p in state.job_pods(job.key) if not p.terminating)
        await self.attempts.replace_pods(job, old)

    @staticmethod
    def _attempt_began(job: Job, now: float) -> float:
        """When the gang's current attempt was decided (its placement, or its last restart)."""
        restart = job.status.last_restart
        if restart is not None and restart.decided_at is not None:
            return restart.decided_at.timestamp()
        placed = job.condition(ConditionType.PLACED)
        if placed is not None and placed.last_transition_time is not None:
            return placed.last_transition_time.timestamp()
        return now

    def _checkpoint_first(self, job: Job, wanted: bool, timeout: float) -> bool:
        """True when the resize may go ahead: no checkpoint wanted, nobody reports, or the checkpoint
        every rank was asked for is in (or timed out)."""
        if not wanted or self.checkpoints.saved_first(job, timeout):
            return True
        asyncio.get_running_loop().call_later(1.0, self.writer.wake)
        return False
