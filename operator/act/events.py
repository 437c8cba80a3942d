"""Posts Events about jobs, aggregated as kube's EventCorrelator does: one Event object per (job,
reason, stable key); a repeat bumps its count and lastTimestamp instead of creating a new object."""

from __future__ import annotations

from railyard.operator.act.actor_context import Context
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import EventType, Reason
from railyard.operator.decide.builders import build_event, event_name
from railyard.topology.api.job import rfc3339

REMEMBERED = 10_000  # event names whose count is known; beyond that the oldest half is forgotten


class Events:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._counts: dict[str, tuple[int, str]] = {}  # event name -> (count, firstTimestamp)

    async def post(self, job: Job, type_: EventType, reason: Reason, message: str, key: str = "") -> None:
        now = rfc3339(utc(self.ctx.clock.time()))
        name = event_name(job, reason, key or message)
        count, first = self._counts.get(name, (0, now))
        self._counts[name] = (count + 1, first)
        if len(self._counts) > REMEMBERED:
            for old in list(self._counts)[:REMEMBERED // 2]:
                del self._counts[old]
        await self.ctx.api.post_event(build_event(job, type_, reason, message, now, key or message, count + 1, first),
                                      existing=count > 0)

    async def normal(self, job: Job, reason: Reason, message: str, key: str = "") -> None:
        await self.post(job, EventType.NORMAL, reason, message, key)

    async def warning(self, job: Job, reason: Reason, message: str, key: str = "") -> None:
        await self.post(job, EventType.WARNING, reason, message, key)
