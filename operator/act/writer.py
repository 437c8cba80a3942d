"""Writes a job's status: a typed partial status (decide/status_transitions.py) sent as a conditional merge
patch (409 if the job changed since it was read); the answer is applied to the state at once, so
the state never lags behind what this replica wrote. Also the guard every per-job step runs in."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from railyard.operator.act.actor_context import Context
from railyard.operator.base.objects import Job, Key
from railyard.operator.kube.client import ApiException, Fenced
from railyard.topology.api.job import TrainingJobStatus

log = logging.getLogger("railyard.writer")


class StatusWriter:
    def __init__(self, ctx: Context, wake: Callable[[], None]) -> None:
        self.ctx = ctx
        self.wake = wake
        # Told of an unexpected error in a job's step (act/errors.JobErrors.report), once the loop is built.
        self.on_error: Callable[[Job, str, BaseException], Awaitable[None]] | None = None

    async def patch(self, job: Job, status: TrainingJobStatus) -> Job | None:
        """The job as stored after the write; None when it is gone."""
        body = status.as_patch()
        body.setdefault("observedGeneration", job.generation)
        updated = await self.ctx.api.patch_job_status(job.namespace, job.name, body, job.resource_version)
        if updated is None:
            return None
        self.ctx.state.apply_job("MODIFIED", updated)
        return self.ctx.state.jobs.get(job.key)

    def current(self, job: Job) -> Job:
        """The freshest version the state holds (a write earlier in this step may have replaced it)."""
        return self.ctx.state.jobs.get(job.key) or job

    async def guard(self, key: Key, step: Awaitable[Any], stage: str = "act") -> bool:
        """Run one job's step; True when it went through. A conflict means re-read and decide again next
        pass; a refused write or any other error is reported on the job (and it backs off); leadership
        loss (Fenced) ends the whole pass."""
        try:
            await step
            return True
        except Fenced:
            raise
        except ApiException as e:
            if e.status == 409:  # someone wrote since we read: re-read, the next iteration re-decides
                log.info("job %s/%s: conflict (%s); re-reading", *key, e.reason)
                fresh = await self.ctx.api.get_job(*key)
                if fresh is not None:
                    self.ctx.state.apply_job("MODIFIED", fresh)
                self.wake()
                return False
            if e.status is not None and e.status >= 500:  # the API server's trouble: retried next pass
                log.warning("job %s/%s: step failed (%s %s); will retry", *key, e.status, e.reason)
                return False
            await self._report(key, stage, e)
        except Exception as e:
            await self._report(key, stage, e)
        return False

    async def _report(self, key: Key, stage: str, error: BaseException) -> None:
        job = self.ctx.state.jobs.get(key)
        if job is None or self.on_error is None:
            log.error("job %s/%s: %s failed", *key, stage, exc_info=error)
            return
        await self.on_error(job, stage, error)
