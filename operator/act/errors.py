"""One job's trouble stays that job's: an unexpected error while assessing, solving or acting on a job
ends in a condition on it (Placed=False for a job without a placement, Stalled=True for one with),
an Event and a log line with the traceback, and the job is left alone for a growing while (5 s,
doubling, at most 5 min) while the pass goes on for every other job. The next step that succeeds
clears it."""

from __future__ import annotations

import logging

from railyard.operator.act.actor_context import Context
from railyard.operator.act.events import Events
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import ConditionType, PlacedReason
from railyard.operator.decide import status_transitions as transitions

log = logging.getLogger("railyard.errors")
BACKOFF_SECONDS, BACKOFF_MAX_SECONDS = 5.0, 300.0


class JobErrors:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events) -> None:
        self.ctx = ctx
        self.writer = writer
        self.events = events

    def resting(self, job: Job) -> bool:
        """Left alone for now after repeated errors."""
        memory = self.ctx.memories.peek(job)
        return memory is not None and memory.backoff_until > self.ctx.clock.monotonic()

    async def report(self, job: Job, stage: str, error: BaseException) -> None:
        memory = self.ctx.memories.recall(job)
        memory.errors += 1
        memory.backoff_until = self.ctx.clock.monotonic() + min(BACKOFF_MAX_SECONDS,
                                                                BACKOFF_SECONDS * 2 ** (memory.errors - 1))
        metrics.JOB_ERRORS.labels(stage).inc()
        log.error("job %s/%s: %s failed (%d in a row); the pass goes on without it", *job.key, stage, memory.errors,
                  exc_info=error)
        message = f"{stage}: {type(error).__name__}: {error}"[:900] + " (the operator's log has the details)"
        patch = transitions.internal_error(job, message, utc(self.ctx.clock.time()))
        if patch is None:
            return
        # The Event first: the job's own status may be what fails.
        await self.events.warning(job, PlacedReason.INTERNAL_ERROR, message, key=f"{stage}/{type(error).__name__}")
        try:
            await self.writer.patch(self.writer.current(job), patch)
        except Exception as e:  # the log line above has the error itself
            log.warning("job %s/%s: could not write the error to its status: %s", *job.key, e)

    def failing(self, job: Job) -> bool:
        """Errors in a row that a success would clear (asked before making `cleared` a task)."""
        memory = self.ctx.memories.peek(job)
        return memory is not None and bool(memory.errors)

    async def cleared(self, job: Job) -> None:
        """A step succeeded: forget the errors; lift Stalled if it was set."""
        memory = self.ctx.memories.peek(job)
        if memory is None or not self.failing(job):
            return
        memory.errors, memory.backoff_until = 0, 0.0
        current = self.writer.current(job)
        if current.is_true(ConditionType.STALLED):
            await self.writer.patch(current, transitions.internal_error_cleared(current, utc(self.ctx.clock.time())))
