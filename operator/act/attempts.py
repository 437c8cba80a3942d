"""Starts a new attempt of a released gang (restart, shrink, resize): records it in status first
(write-ahead: an operator killed after this finishes it, see assess -> Resume), then deletes the old
attempt's pods (those on lost nodes with grace 0: no kubelet will confirm) and sends the new one to
the release line."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime

from railyard.operator.act.actor_context import Context
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.materialiser import Materialiser
from railyard.operator.act.pods import PodDeleter
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import Cause
from railyard.operator.decide import status_transitions as transitions
from railyard.topology.api.job import Condition, UnhealthyNode
from railyard.topology.cluster.model import GpuNode
from railyard.topology.solver.placement import Placement


class Attempts:
    def __init__(self, ctx: Context, writer: StatusWriter, checkpoints: Checkpoints, pods: PodDeleter,
                 materialiser: Materialiser) -> None:
        self.ctx = ctx
        self.writer = writer
        self.checkpoints = checkpoints
        self.pods = pods
        self.materialiser = materialiser

    async def record(self, job: Job, cause: Cause, message: str, replicas: Sequence[tuple[GpuNode, tuple[int, ...]]],
                     record: dict[str, object], unhealthy: list[UnhealthyNode] | None = None,
                     counted: bool = False, conditions: list[Condition] | None = None,
                     straggler_evictions: list[datetime] | None = None,
                     preemptions: list[datetime] | None = None,
                     adopted: Sequence[tuple[str, str]] | None = None,
                     kept: Mapping[int, str] | None = None) -> Job | None:
        """Write the new attempt (its placement in rank order, the restart record with the resume
        point); None when the write did not happen (job gone)."""
        placement = Placement.from_replicas(list(replicas), self.ctx.state.scheme.levels)
        patch = transitions.new_attempt(job, cause, message, placement, uuid.uuid4().hex[:10],
                                        utc(self.ctx.clock.time()), record, self.checkpoints.committed(job), counted,
                                        unhealthy, conditions, straggler_evictions, preemptions, adopted, kept)
        fresh = await self.writer.patch(job, patch)
        if fresh is None:
            return None
        self.ctx.crash_point("restart-recorded")
        return fresh

    async def replace_pods(self, job: Job, everyone: Sequence[str], force: Sequence[str] = (),
                           kept: Mapping[int, str] | None = None) -> None:
        """The old attempt goes (but the pods an in-place restart keeps); the new one (recorded) joins the release
        line."""
        current = self.writer.current(job)
        # The kept pods are relabelled after the release (act/materialiser): the placement names them meanwhile.
        await self.pods.delete(job.key, everyone, force)
        placement = current.placement
        only = tuple(r.pod or "" for r in placement.ranks if r.rank not in kept) if kept and placement else None
        self.materialiser.enqueue(current, only)
