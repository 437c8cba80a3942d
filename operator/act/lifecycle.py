"""The simple steps of a job's life: finish a recorded placement (resume), say a spec is invalid,
roll a placement back, mark the gang Running, Succeeded or Failed, clean up a finished gang."""

from __future__ import annotations

from datetime import datetime

from railyard.operator.act.actor_context import Context
from railyard.operator.act.events import Events
from railyard.operator.act.materialiser import Materialiser
from railyard.operator.act.pods import PodDeleter
from railyard.operator.act.quarantine import Quarantine
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import ConditionType, EventType, PlacedReason
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.actions import Cleanup, Finish, Invalid, MarkRunning, RecordRelease, Resume, Rollback


class Lifecycle:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, pods: PodDeleter,
                 materialiser: Materialiser, quarantine: Quarantine) -> None:
        self.ctx = ctx
        self.writer = writer
        self.events = events
        self.pods = pods
        self.materialiser = materialiser
        self.quarantine = quarantine

    def _now(self) -> datetime:
        return utc(self.ctx.clock.time())

    async def resume(self, job: Job, action: Resume) -> None:
        restart = job.status.last_restart
        if job.is_true(ConditionType.RESTARTING) and restart is not None and restart.quarantine:
            await self.quarantine.apply(restart.quarantine)  # the write-ahead record's: idempotent
        if action.stale or action.force:  # an older placement first: it holds the GPUs
            await self.pods.delete(job.key, action.stale, action.force)
        self.materialiser.enqueue(job, action.missing)

    async def invalid(self, job: Job, action: Invalid) -> None:
        patch = transitions.invalid(job, action.reason, action.message, self._now())
        if patch is None:
            return
        await self.events.warning(job, action.reason, action.message)
        await self.writer.patch(job, patch)

    async def rollback(self, job: Job, action: Rollback) -> None:
        metrics.PLACEMENT_FAILURES.labels(action.reason).inc()
        await self.pods.delete(job.key, action.pods, action.force)
        now = self.ctx.clock.time()
        until = utc(now + self.ctx.settings.placement.avoid_seconds)
        patch = transitions.dropped(job, action.reason, action.message, utc(now), action.avoid, until)
        await self.events.warning(job, action.reason, action.message)
        await self.writer.patch(job, patch)

    async def running(self, job: Job, action: MarkRunning) -> None:
        await self.writer.patch(job, transitions.running(job, action.message, self._now(), self._unrecorded(job)))

    async def record_release(self, job: Job, action: RecordRelease) -> None:
        """This operator's release, or one a predecessor made and did not record (seen now: the bind
        timeout counts from here)."""
        placement = job.placement
        if placement is None:
            return
        released_at = self._unrecorded(job)
        if released_at is None:
            memory = self.ctx.memories.recall(job)
            memory.released = (placement.id, self.ctx.clock.monotonic())
            released_at = self._now()
        await self.writer.patch(job, transitions.released(job, released_at))

    def _unrecorded(self, job: Job) -> datetime | None:
        """When this operator released the job's current placement, if its status does not say so yet."""
        placed, placement = job.condition(ConditionType.PLACED), job.placement
        memory = self.ctx.memories.peek(job)
        if placed is not None and placed.reason == PlacedReason.RELEASED:
            return None
        if placement is None or memory is None or memory.released_at is None or memory.released_at[0] != placement.id:
            return None
        return utc(memory.released_at[1])

    async def finish(self, job: Job, action: Finish) -> None:
        patch = transitions.finished(job, action.succeeded, action.reason, action.message, self._now())
        await self.events.post(job, EventType.NORMAL if action.succeeded else EventType.WARNING, action.reason,
                               action.message)
        await self.writer.patch(job, patch)

    async def cleanup(self, job: Job, action: Cleanup) -> None:
        await self.pods.delete(job.key, action.pods, action.force)
