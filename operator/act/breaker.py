"""The circuit breaker: when many nodes holding ranks go NotReady together (decide/policy.partition),
the fault path holds still — no restarts for NotReady losses, no quarantines, no forced deletions —
and the affected jobs say so (Degraded=True, reason Partition); metrics and an alert tell the admin.
Normal handling resumes when it clears."""

from __future__ import annotations

import logging

from railyard.operator.act.actor_context import Context
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.reasons import RecoveryReason
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.policy import Partition, partition

log = logging.getLogger("railyard.breaker")


class Breaker:
    def __init__(self, ctx: Context, writer: StatusWriter) -> None:
        self.ctx = ctx
        self.writer = writer
        self.state = Partition(False, (), 0)

    @property
    def tripped(self) -> bool:
        return self.state.tripped

    def evaluate(self) -> Partition:
        state, settings = self.ctx.state, self.ctx.settings
        if not self.state.tripped and all(h.ready for h in state.health.values()):
            # Every pass on a healthy cluster: nothing can count, so the nodes holding ranks are not
            # gathered (their number is read only when the breaker flips).
            self.state = Partition(False, (), 0)
            metrics.PARTITION.set(0)
            metrics.UNREADY_RANKED_NODES.set(0)
            return self.state
        ranked: set[str] = set()
        for job in state.jobs.values():
            if job.placement is not None and not job.finished:
                ranked.update(r.node for r in job.placement.ranks)
        leaf_of = {n: m.leaf for n in ranked if (m := state.last_model.get(n)) is not None}
        was = self.state.tripped
        faults = settings.faults
        self.state = partition(state.health, ranked, leaf_of, self.ctx.clock.monotonic(), was,
                               faults.breaker_window_seconds, faults.breaker_share, faults.breaker_min_nodes)
        if self.state.tripped != was:
            log.warning("circuit breaker %s: %s", "tripped" if self.state.tripped else "cleared",
                        self.state.message or f"{len(self.state.unready)} of {self.state.ranked} nodes NotReady")
        metrics.PARTITION.set(int(self.state.tripped))
        metrics.UNREADY_RANKED_NODES.set(len(self.state.unready))
        return self.state

    async def mark(self) -> None:
        """Degraded=Partition on jobs with ranks on a dark node while tripped; lifted when cleared."""
        jobs = self.ctx.state.jobs
        if not self.state.tripped and not any(j.degraded == RecoveryReason.PARTITION for j in jobs.values()):
            return  # nothing to mark, nothing to lift (asked every pass)
        now = utc(self.ctx.clock.time())
        unready = set(self.state.unready)
        for job in list(jobs.values()):
            if job.placement is None or job.finished or job.deleting:
                continue
            marked = job.degraded == RecoveryReason.PARTITION
            affected = self.state.tripped and any(r.node in unready for r in job.placement.ranks)
            if affected and job.degraded is None:
                patch = transitions.partitioned(job, self.state.message, now)
            elif marked and not affected:
                patch = transitions.partition_cleared(job, now)
            else:
                continue
            await self.writer.guard(job.key, self.writer.patch(job, patch))
