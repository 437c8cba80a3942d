"""Writes each job's EndpointSlice (the addresses behind its ranks' DNS names) when
decide/rank_addresses says the addresses are worth a write; remembers what it wrote per job."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from railyard.operator.act.actor_context import Context
from railyard.operator.base.objects import Job
from railyard.operator.decide.rank_addresses import (
    Addresses,
    addresses,
    endpoint_slices,
    same_endpoints,
    slice_count,
    worth_writing,
)
from railyard.operator.kube.client import ApiException, Fenced

log = logging.getLogger("railyard.endpoints")

PLURAL = "endpointslices"


class EndpointsWriter:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def due(self, job: Job) -> Awaitable[None] | None:
        """The write the job's addresses call for now, or None (asked every pass for every job: no
        task unless there is something to write)."""
        placement = job.placement
        if placement is None or job.finished:
            return None  # a finished gang's names no longer matter: its slice goes with the job
        memory = self.ctx.memories.recall(job)
        seen = self.ctx.state.job_version(job)
        if memory.endpoints_checked == seen and memory.endpoints_partial_since is None:
            return None  # neither its pods nor the job changed since its addresses called for no write
        current = addresses(job, placement, self.ctx.state.pods)
        if current is None:
            memory.endpoints_checked = seen
            return None
        mono = self.ctx.clock.monotonic()
        if not current or len(current) == len(placement.ranks):
            memory.endpoints_partial_since = None
        elif memory.endpoints_partial_since is None:
            memory.endpoints_partial_since = mono
        since = memory.endpoints_partial_since
        if not worth_writing(current, memory.endpoints, len(placement.ranks), 0.0 if since is None else mono - since):
            memory.endpoints_checked = seen
            return None
        memory.endpoints_checked = None  # written, or to be tried again next pass
        return self._write(job, current)

    async def _write(self, job: Job, current: Addresses) -> None:
        memory = self.ctx.memories.recall(job)
        before = slice_count(memory.endpoints)  # written by this operator: those exist (unless deleted since)
        for index, body in enumerate(endpoint_slices(job, current, before)):
            try:
                stored = None
                if index < before:
                    stored = await self.ctx.limited(self.ctx.api.replace, PLURAL, body)
                if stored is None:
                    created, answer = await self.ctx.limited(self.ctx.api.create, PLURAL, body)
                    stored = answer if created else await self._adopt(body, answer)
            except Fenced:
                raise  # leadership ended: the pass stops writing (writer.guard's rule)
            except Exception as e:  # one job's DNS is that job's trouble: retried next pass, the loop goes on
                detail = e.body[:300] if isinstance(e, ApiException) and e.body else ""
                log.warning("job %s/%s: EndpointSlice %s not written (%s %s); its rank names may not resolve yet",
                            job.namespace, job.name, body["metadata"]["name"], getattr(e, "reason", e), detail)
                return
            if stored is None:
                return  # deleted between two calls: written again next pass
        memory.endpoints = current
        memory.endpoints_partial_since = None

    async def _adopt(self, body: dict[str, Any], existing: dict[str, Any] | None) -> dict[str, Any] | None:
        """A slice of this name exists (a predecessor's, or this operator's before a restart): kept when
        it already says the same, else replaced."""
        if existing is not None and same_endpoints(existing, body):
            return existing
        return await self.ctx.limited(self.ctx.api.replace, PLURAL, body)
