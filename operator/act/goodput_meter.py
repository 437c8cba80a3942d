"""Per-job goodput (decide/goodput_ledger.py) kept by the report flusher: accounted on every flush from what
the ranks report and the state shows, written to status.goodput every RAILYARD_GOODPUT_WRITE_SECONDS,
and exported as railyard_job_goodput_ratio and railyard_job_{productive,lost}_seconds_total. Only jobs
whose ranks report through railyard.worker have it: without steps there is no progress to count."""

from __future__ import annotations

from railyard.operator.act.actor_context import Context
from railyard.operator.base import metrics
from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import ConditionType
from railyard.operator.cache.memory import JobMemory
from railyard.operator.decide import goodput_ledger as goodput
from railyard.operator.decide.goodput_ledger import Activity, Ledger
from railyard.topology.api.job import GoodputStatus

START_ACCOUNTED_SECONDS = 600.0


class GoodputMeter:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._exported: set[Key] = set()

    def account(self, job: Job, memory: JobMemory) -> GoodputStatus | None:
        """Account the time since the last flush; the status to write when one is due, else None."""
        now, mono = self.ctx.clock.time(), self.ctx.clock.monotonic()
        with self.ctx.book.lock:
            progress = self.ctx.book.jobs.get(job.key)
            # A report without a step (a worker that only listens: its save-on-fault poll, its supervisor) is no
            # step 0: counted as one, the attempt's first real step would look like recomputed work.
            if progress is not None and progress.restart_count != job.restart_count:
                progress = None
            steps = [p.step for p in progress.ranks.values() if p.step is not None] if progress is not None else []
            step = max(steps) if steps else None
            first_step = progress.first_step if progress is not None else None
        ledger = memory.goodput
        if ledger is None:
            if job.status.goodput is not None:
                ledger = goodput.from_status(job.status.goodput)
                memory.goodput_restart = self._decided(job)  # what the status accounted already
            elif job.is_true(ConditionType.RUNNING) and step is not None:
                # From when the gang first ran (its start-up counts), unless that was long before this
                # operator kept ledgers (an upgrade): then from now.
                began = job.status.start_time.timestamp() if job.status.start_time is not None else now
                recent = now - began <= START_ACCOUNTED_SECONDS
                ledger = goodput.start(began if recent else now, None if recent else step, job.restart_count)
                memory.goodput_restart = self._decided(job)
            else:
                return None
        before = ledger
        step_time = job.status.step_time
        step_seconds = step_time.p50_seconds if step_time is not None else None
        decided = self._decided(job)
        if decided is not None and decided != memory.goodput_restart:
            # First, while the stall that led to it is still the ledger's: part of it was detection.
            restart = job.status.last_restart
            assert restart is not None and restart.decided_at is not None
            detected = restart.detected_at.timestamp() if restart.detected_at is not None else None
            ledger = goodput.restarted(ledger, detected, restart.decided_at.timestamp(), self._quiet(step_seconds))
            memory.goodput_restart = decided
        ledger = goodput.observe(ledger, now, self._activity(job), job.restart_count, step, first_step, step_seconds,
                                 self._quiet(step_seconds))
        memory.goodput = ledger
        self._export(job, before, ledger)
        if mono - memory.goodput_written < self.ctx.settings.reports.goodput_write_seconds and \
                ledger.attempt == before.attempt:
            return None
        memory.goodput_written = mono
        return goodput.to_status(ledger)

    def forget(self, alive: set[Key]) -> None:
        for key in [k for k in self._exported if k not in alive]:
            self._exported.discard(key)
            metrics.forget_job_goodput(*key)

    def _quiet(self, step_seconds: float | None) -> float:
        """How long running ranks may seem to stand still between flushes: a rank reports at the end of its first
        step after the report interval, and the flush sees the report up to one flush period later."""
        reports = self.ctx.settings.reports
        return reports.worker_interval_seconds + reports.flush_seconds + (step_seconds or 0.0)

    def _activity(self, job: Job) -> Activity:
        if job.is_true(ConditionType.RUNNING):
            return Activity.RUNNING
        placement = job.placement
        pods = self.ctx.state.pods
        if placement is None or any(
                (pod := pods.get((job.namespace, r.pod or ""))) is None or not pod.node_name or pod.gated
                for r in placement.ranks):
            return Activity.WAITING
        return Activity.STARTING

    @staticmethod
    def _decided(job: Job) -> str | None:
        restart = job.status.last_restart
        return restart.decided_at.isoformat() if restart is not None and restart.decided_at is not None else None

    def _export(self, job: Job, before: Ledger, after: Ledger) -> None:
        if job.key not in self._exported and len(self._exported) >= self.ctx.settings.metrics.job_limit:
            return  # RAILYARD_JOB_METRICS_LIMIT: status.goodput still has it
        self._exported.add(job.key)
        productive = max(0.0, after.productive - before.productive)
        metrics.JOB_PRODUCTIVE_SECONDS.labels(job.namespace, job.name).inc(productive)
        was = before.lost_by_cause()
        for cause, seconds in after.lost_by_cause().items():
            gained = seconds - was[cause]
            if gained > 0:  # (detection moves time out of stalled: a counter only ever grows)
                metrics.JOB_LOST_SECONDS.labels(job.namespace, job.name, cause.value).inc(gained)
        if after.ratio is not None:
            metrics.JOB_GOODPUT.labels(job.namespace, job.name).set(after.ratio)
