"""A gang's checkpoints, decided: which step is committed (every rank of the attempt saved it), when a step
every rank was asked to save is in (or its wait is over), and when the work a gang would keep was last
saved. Pure: act/checkpoints.py feeds it the ranks' reports (cache/progress_book) and the job's status."""

from __future__ import annotations

from datetime import datetime

from railyard.operator.base.objects import Job
from railyard.topology.api.job import CheckpointRecord


def committed(job: Job, reported: tuple[int, str] | None, now: datetime) -> CheckpointRecord | None:
    """The newest checkpoint every rank saved: the recorded one, or a newer one the ranks reported
    (`reported`: its step and path), stamped now."""
    recorded = job.status.last_checkpoint
    if reported is None or (recorded is not None and recorded.step >= reported[0]):
        return recorded
    return CheckpointRecord(step=reported[0], path=reported[1], time=now, restart_count=job.restart_count)


def request_answered(step: int, deadline: float, saved_step: int | None, now: float) -> bool:
    """Every rank saved the step asked for, or the wait for it is over (`deadline`)."""
    return (saved_step is not None and saved_step >= step) or now >= deadline


def last_saved(job: Job, checkpoint: CheckpointRecord | None) -> float | None:
    """When the work the gang would keep was saved: its last committed checkpoint of this attempt, else the
    start of its current attempt (everything since would be recomputed); None: not known."""
    if checkpoint is not None and checkpoint.time is not None and checkpoint.restart_count == job.restart_count:
        return checkpoint.time.timestamp()
    restart = job.status.last_restart
    began = restart.released_at if restart is not None and restart.released_at is not None else \
        job.status.start_time
    return began.timestamp() if began is not None else None


def nobody_reports(pods_report: bool, listening_for: float, report_interval: float) -> bool:
    """Whether a gang of which nothing was heard this attempt, due to save a step first, has no ranks that
    could save it, so it goes at once: its pods are not given the report endpoint (`pods_report`), or this
    operator has listened long enough (`listening_for`, since its leadership began) that reporting ranks
    would have been heard — three report intervals. A new leader's empty book is not silence: it waits that
    long before it takes the ranks for ones that never report."""
    return not pods_report or listening_for >= 3 * report_interval
