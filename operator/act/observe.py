"""Publishes what the state says as metrics after a pass, at most every `publish_seconds`: jobs by
state, how long the oldest job has waited by the reason it waits, per-job series, quarantined nodes,
free capacity. Every state and waiting reason is set each time (from the enums), so no series is left
stale when its last job moves on. A job's own figures are read again only when it changed (its resourceVersion), and a
series is set only when its figures changed."""

from __future__ import annotations

from railyard.operator.act.actor_context import Context
from railyard.operator.base import metrics
from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import WAITING_REASONS, ConditionType, JobState, PlacedReason, RecoveryReason
from railyard.topology.cluster.model import Snapshot


class Observer:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.job_series = metrics.JobSeries(ctx.settings.metrics.job_limit)
        # Per job, its figures and the resourceVersion they were read from: they are the job's alone.
        self._figures: dict[Key, tuple[str, metrics.JobFigures]] = {}
        self._published_at: float | None = None

    def due(self) -> bool:
        """Whether to publish after this pass; a yes counts as published (the caller then observes)."""
        now = self.ctx.clock.monotonic()
        if self._published_at is not None and now - self._published_at < self.ctx.settings.metrics.publish_seconds:
            return False
        self._published_at = now
        return True

    def observe(self, snapshot: Snapshot) -> None:
        states = dict.fromkeys(JobState, 0)
        oldest = dict.fromkeys(WAITING_REASONS, 0.0)
        per_job: list[metrics.JobFigures] = []
        figures: dict[Key, tuple[str, metrics.JobFigures]] = {}
        now = self.ctx.clock.time()
        capped = 0
        for job in self.ctx.state.jobs.values():
            state = job.state
            states[state] += 1
            capped += job.degraded == RecoveryReason.RESTART_CAP
            version = job.resource_version
            known = self._figures.get(job.key)
            if version is None or known is None or known[0] != version:
                known = (version or "", _figures(job))
            figures[job.key] = known
            per_job.append(known[1])
            if state == JobState.QUEUED:
                placed = job.condition(ConditionType.PLACED)
                reason = _waiting_reason(placed.reason if placed is not None else None)
                since = job.queued_since
                waited = max(0.0, now - since.timestamp()) if since is not None else 0.0
                oldest[reason] = max(oldest[reason], waited)
        for state, count in states.items():
            metrics.JOBS.labels(state).set(count)
        for reason, waited in oldest.items():
            metrics.OLDEST_WAIT.labels(reason).set(waited)
        self._figures = figures
        self.job_series.update(per_job)
        metrics.QUARANTINED_NODES.set(sum(1 for h in self.ctx.state.health.values() if h.taints and h.quarantined))
        metrics.INFRA_RESTARTS_CAPPED.set(capped)
        metrics.observe_capacity(snapshot)


def _figures(job: Job) -> metrics.JobFigures:
    state, status, spec = job.state, job.status, job.spec
    checkpointed = None
    if state == JobState.RUNNING:  # staleness counts from the start while nothing was saved yet
        stamp = (status.last_checkpoint.time if status.last_checkpoint is not None else None) or status.start_time
        checkpointed = stamp.timestamp() if stamp is not None else None
    return metrics.JobFigures(
        job.namespace, job.name, state, job.placement.tors if job.placement is not None else None,
        status.replicas, job.restart_count, checkpointed,
        spec.checkpoint.interval_seconds if spec is not None and spec.checkpoint is not None else None,
        status.step_time.p50_seconds if state == JobState.RUNNING and status.step_time is not None else None,
        len(status.stragglers or []) if job.straggler_policy is not None else None)


def _waiting_reason(reason: str | None) -> PlacedReason:
    """A queued job's Placed reason; NEW before the first decision (or for a reason this version does
    not write, such as one an older operator left)."""
    try:
        found = PlacedReason(reason) if reason else PlacedReason.NEW
    except ValueError:
        return PlacedReason.NEW
    return found if found.waiting else PlacedReason.NEW
