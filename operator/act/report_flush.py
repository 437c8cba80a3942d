"""Writes what the ranks' reports add up to — a newly committed checkpoint, the step time, the
stragglers and the Straggling condition — at most once per job per flush period (never a status write
per report), and, when the job's policy says so, marks a straggler for eviction (checkpoint first): the
job's next assessment answers a restart without the node, carried out like any other (act/recovery.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from railyard.operator.act.actor_context import Context
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.events import Events
from railyard.operator.act.goodput_meter import GoodputMeter
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import ConditionType, EventReason, StragglerMark
from railyard.operator.cache.memory import JobMemory
from railyard.operator.decide.actions import Restart
from railyard.operator.decide.quarantine_limits import Limits
from railyard.operator.decide.straggler_status import eviction_restart, status_fields, to_evict
from railyard.operator.decide.stragglers import Straggler, StragglerTracker, score
from railyard.topology.api.job import StragglerAction, StragglerPolicy, TrainingJobStatus
from railyard.topology.solver.rank_order import pipeline_stage


class ReportFlusher:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, checkpoints: Checkpoints) -> None:
        self.ctx = ctx
        self.writer = writer
        self.events = events
        self.checkpoints = checkpoints
        self.goodput = GoodputMeter(ctx)

    async def flush(self) -> None:
        state, book = self.ctx.state, self.ctx.book
        book.forget(set(state.jobs))
        self.goodput.forget(set(state.jobs))
        mono, now = self.ctx.clock.monotonic(), self.ctx.clock.time()
        writes: list[Awaitable[object]] = []
        persistent = 0
        for key in list(book.jobs):
            job = state.jobs.get(key)
            if job is None:
                continue
            memory = self.ctx.memories.recall(job)
            if mono - memory.flushed_at < self.ctx.settings.reports.flush_seconds:
                continue
            if job.deleting or job.finished:
                continue
            fields: dict[str, object] = {}
            accounted = self.goodput.account(job, memory)
            if accounted is not None:
                fields["goodput"] = accounted
            committed = self.checkpoints.committed(job)
            if committed is not None and committed is not job.status.last_checkpoint:
                fields["last_checkpoint"] = committed
            eviction = None
            policy = job.straggler_policy
            if policy is not None and job.is_true(ConditionType.RUNNING):
                judged, eviction, slow = self._judge(job, memory, policy, now)
                fields.update(judged)
                persistent += len(slow)
                if "conditions" in judged and slow:  # Straggling just became (or changed) Slow
                    writes += [self.events.warning(job, EventReason.STRAGGLER_DETECTED,
                                                   f"{f.node}: score {f.score:.2f}",
                                                   key=f"{job.restart_count}/{f.node}") for f in slow]
            if eviction is not None:
                self._evict(job, memory, eviction, now)
            elif fields:
                memory.flushed_at = mono
                writes.append(self.writer.guard(key, self._write(job, TrainingJobStatus(**fields))))
        metrics.STRAGGLERS.set(persistent)
        await asyncio.gather(*writes)

    async def _write(self, job: Job, patch: TrainingJobStatus) -> None:
        await self.writer.patch(job, patch)

    def _judge(self, job: Job, memory: JobMemory, policy: StragglerPolicy, now: float
               ) -> tuple[dict[str, object], Restart | None, list[Straggler]]:
        """Status fields that changed, an eviction to carry out (or None), and the persistent stragglers."""
        progress = self.ctx.book.jobs[job.key]
        restart_count = job.restart_count
        if progress.restart_count != restart_count or now - progress.started < policy.window.seconds:
            return {}, None, []
        ranks = job.placement.ranks if job.placement is not None else []
        rank_nodes = {r.rank: r.node for r in ranks}
        state = self.ctx.state
        models = {n: state.nodes.get(n) or state.last_model.get(n) for n in set(rank_nodes.values())}
        tors = {n: m.tor for n, m in models.items() if m is not None}
        spec = job.spec
        assert spec is not None
        stages = {r: pipeline_stage(r, len(ranks), spec.gpus_per_replica, spec.parallelism) for r in rank_nodes}
        with self.ctx.book.lock:  # the report endpoint's thread records into it
            samples, first_step = progress.samples(), progress.first_step or 0
        scores = score(samples, rank_nodes, tors, policy, first_step, stages)
        if scores is None:
            return {}, None, []
        tracker = memory.tracker(restart_count)
        if tracker is None:  # seeded from status: an operator restart does not reset how long a node was slow
            recorded = {s.node: (s.since.timestamp() if s.since is not None else now)
                        for s in job.status.stragglers or []}
            tracker = StragglerTracker(below_since=recorded)
            memory.stragglers = (restart_count, tracker)
        flagged = tracker.observe(scores, now, policy)
        slow = [f for f in flagged if f.persistent]
        mark = {f.node: StragglerMark.REPORTED for f in flagged}
        eviction = None
        if policy.action == StragglerAction.EVICT:
            eviction = self._eviction(job, memory, policy, flagged, scores.step_p50, tracker, now, mark)
        return status_fields(job, scores, flagged, slow, mark, policy, now), eviction, slow

    def _eviction(self, job: Job, memory: JobMemory, policy: StragglerPolicy, flagged: list[Straggler],
                  step_seconds: float | None, tracker: StragglerTracker, now: float,
                  mark: dict[str, StragglerMark]) -> Restart | None:
        """Evict the slowest persistent straggler; with checkpointBeforeEvict, after the checkpoint
        every rank was asked for (or its timeout). One eviction at a time: while the one decided waits for its
        restart (the loop carries it out), no other is chosen and no second checkpoint asked for."""
        if memory.straggler is not None and memory.straggler[0] == job.restart_count:
            mark[memory.straggler[1].node] = StragglerMark.EVICTED
            return None
        node = memory.evicting
        if node is None:
            worst = to_evict(job, flagged, tracker, policy, Limits.of(self.ctx.settings.quarantine), now)
            if worst is None:
                return None
            if not policy.checkpoint_before_evict:
                return eviction_restart(job, worst)
            node = memory.evicting = worst.node
        mark[node] = StragglerMark.CHECKPOINT_REQUESTED
        if not self.checkpoints.ready(job, memory, policy.checkpoint_timeout_seconds, step_seconds):
            return None
        flag = next((f for f in flagged if f.node == node), None)
        if flag is None:  # it recovered while the checkpoint was taken: nothing to evict
            memory.evicting = None
            self.checkpoints.end(job, memory)
            return None
        return eviction_restart(job, flag)

    def _evict(self, job: Job, memory: JobMemory, action: Restart, now: float) -> None:
        """The gang restarts without the straggler (the fault path: replacement next to it, quarantine): the
        loop's next look at the job sees the loss."""
        tracker = memory.tracker(job.restart_count)
        if tracker is not None:
            tracker.evicted(now)
        memory.evicting = None
        memory.straggler = (job.restart_count, action.losses[0])
        memory.steady = None  # a steady gang is not assessed again until something changes: this has
        self.checkpoints.end(job, memory)
        metrics.STRAGGLER_EVICTIONS.inc()
        self.writer.wake()

