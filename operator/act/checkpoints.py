"""Checkpoints from the ranks' reports: which step is committed (every rank of the attempt saved it),
and the request that every rank save one step before an eviction or a resize. The request rides on
the report answers (cache/progress_book.ProgressBook); it is answered once every rank reported that step
saved, or at its timeout."""

from __future__ import annotations

from railyard.operator.act.actor_context import Context
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.cache.memory import CheckpointRequest, FaultSaveRequest, JobMemory
from railyard.operator.decide.checkpoint_wait import committed, last_saved, nobody_reports, request_answered
from railyard.operator.decide.fault_save import FaultSave, FaultSaveOutcome, answered
from railyard.operator.decide.policy import checkpoint_step
from railyard.topology.api.job import CheckpointRecord


class Checkpoints:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def committed(self, job: Job) -> CheckpointRecord | None:
        """The newest checkpoint every rank saved: the recorded one, or a newer one from the reports — or the
        step the survivors of a fault saved, one per shard, when newer (decide/fault_save.py)."""
        world = len(job.placement.ranks) if job.placement is not None else 0
        reported = self.ctx.book.committed(job.key, job.restart_count, world)
        request = self.ctx.memories.recall(job).fault_save
        if request is not None and request.restart_count == job.restart_count and request.saved is not None and \
                (reported is None or request.saved[0] > reported[0]):
            reported = request.saved
        return committed(job, reported, utc(self.ctx.clock.time()))

    def last_saved(self, job: Job) -> float | None:
        """When the work the gang would keep was saved (decide/checkpoint_wait.last_saved)."""
        return last_saved(job, self.committed(job))

    def ready(self, job: Job, memory: JobMemory, timeout: float, step_seconds: float | None) -> bool:
        """Ask every rank to save one step (a pending request is reused); True once every rank of the
        attempt reported that step saved, or after `timeout`."""
        now = self.ctx.clock.time()
        if memory.checkpoint is None:
            with self.ctx.book.lock:
                max_step = self.ctx.book.jobs[job.key].max_step
            step = checkpoint_step(max_step, self.ctx.settings.reports.worker_interval_seconds, step_seconds)
            memory.checkpoint = CheckpointRequest(step, now + timeout)
            self.ctx.book.ask_checkpoint(job.key, step)
            return False
        world = len(job.placement.ranks) if job.placement is not None else 0
        saved = self.ctx.book.committed(job.key, job.restart_count, world)
        return request_answered(memory.checkpoint.step, memory.checkpoint.deadline,
                                saved[0] if saved is not None else None, now)

    def saved_first(self, job: Job, timeout: float) -> bool:
        """True when the gang may be restarted now: nobody of this attempt reports, or the step every
        rank was asked to save is in (or `timeout` passed). False while it waits (then ask again)."""
        progress = self.ctx.book.jobs.get(job.key)
        if progress is None or progress.restart_count != job.restart_count:
            reports = self.ctx.settings.reports
            return nobody_reports(bool(reports.url), self.ctx.clock.monotonic() - self.ctx.listening_since,
                                  reports.worker_interval_seconds)
        memory = self.ctx.memories.recall(job)
        step_seconds = job.status.step_time.p50_seconds if job.status.step_time is not None else None
        if not self.ready(job, memory, timeout, step_seconds):
            return False
        self.end(job, memory)
        return True

    def saved_on_fault(self, job: Job, plan: FaultSave, timeout: float) -> FaultSaveOutcome:
        """Ask the survivors `plan` names to save their last completed step (once per attempt); WAITING while
        they have not all saved one step newer than the last checkpoint and the wait is not over."""
        progress = self.ctx.book.jobs.get(job.key)
        if progress is None or progress.restart_count != job.restart_count:
            # Nobody of this attempt was heard: nobody could answer — unless this leader has only just begun to
            # listen (a leader change during the wait: the survivors still report, and are asked again).
            reports = self.ctx.settings.reports
            if nobody_reports(bool(reports.url), self.ctx.clock.monotonic() - self.ctx.listening_since,
                              reports.worker_interval_seconds):
                return FaultSaveOutcome.NOT_REPORTING
            return FaultSaveOutcome.WAITING
        memory = self.ctx.memories.recall(job)
        now = self.ctx.clock.time()
        request = memory.fault_save
        if request is None or request.restart_count != job.restart_count:
            last = self.committed(job)
            memory.fault_save = FaultSaveRequest(job.restart_count, dict(plan.savers), now + timeout,
                                                 last.step if last is not None else None)
            self.ctx.book.ask_fault_save(job.key, job.restart_count, plan.savers)
            return FaultSaveOutcome.WAITING
        if request.saved is not None:
            return FaultSaveOutcome.SAVED
        if dict(plan.savers) != request.savers:
            # A saver was lost while saving: its shards are asked of their next survivors, within the same wait.
            request.savers = dict(plan.savers)
            self.ctx.book.ask_fault_save(job.key, job.restart_count, plan.savers)
        saved = answered(request.savers, self.ctx.book.fault_saved(job.key, job.restart_count, request.savers),
                         request.after_step)
        if isinstance(saved, tuple):
            request.saved = saved
            self.ctx.book.end_fault_save(job.key)
            return FaultSaveOutcome.SAVED
        if not saved and now < request.deadline:
            return FaultSaveOutcome.WAITING
        self.ctx.book.end_fault_save(job.key)
        return FaultSaveOutcome.NO_ANSWER

    def end(self, job: Job, memory: JobMemory) -> None:
        memory.checkpoint = None
        self.ctx.book.end_checkpoint_request(job.key)
