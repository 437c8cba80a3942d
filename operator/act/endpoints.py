"""Writes each job's EndpointSlice (the addresses behind its ranks' DNS names) when
decide/endpoints says the addresses are worth a write; remembers what it wrote per job."""

from __future__ import annotations

import logging

from railyard.operator.act.context import Context
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import ConditionType
from railyard.operator.decide.endpoints import addresses, ending, endpoint_slice, worth_writing
from railyard.operator.kube.client import ApiException

log = logging.getLogger("railyard.endpoints")

PLURAL = "endpointslices"


class EndpointsWriter:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def sync(self, job: Job) -> None:
        placement = job.placement
        if placement is None or job.is_true(ConditionType.SUCCEEDED) or job.is_true(ConditionType.FAILED):
            return  # a finished gang's names no longer matter: its slice goes with the job
        pods = self.ctx.state.pods
        if ending(job, placement, pods):
            return
        memory = self.ctx.memories.recall(job)
        current = addresses(job, placement, pods)
        mono = self.ctx.clock.monotonic()
        if not current or len(current) == len(placement.ranks):
            memory.endpoints_partial_since = None
        elif memory.endpoints_partial_since is None:
            memory.endpoints_partial_since = mono
        since = memory.endpoints_partial_since
        if not worth_writing(current, memory.endpoints, len(placement.ranks), 0.0 if since is None else mono - since):
            return
        body = endpoint_slice(job, current)
        try:
            replaced = None
            if memory.endpoints is not None:  # written by this operator: it exists (unless deleted since)
                replaced = await self.ctx.limited(self.ctx.api.replace(PLURAL, body))
            if replaced is None:
                created, _ = await self.ctx.limited(self.ctx.api.create(PLURAL, body))
                if not created:  # written by a predecessor (or before a restart): replace it
                    await self.ctx.limited(self.ctx.api.replace(PLURAL, body))
        except Exception as e:  # one job's DNS is that job's trouble: retried next pass, the loop goes on
            detail = e.body[:300] if isinstance(e, ApiException) and e.body else ""
            log.warning("job %s/%s: EndpointSlice not written (%s %s); its rank names may not resolve yet",
                        job.namespace, job.name, getattr(e, "reason", e), detail)
            return
        memory.endpoints = current
        memory.endpoints_partial_since = None
