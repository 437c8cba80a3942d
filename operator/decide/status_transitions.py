"""Status transitions: each a pure function from the job as read (and the time) to the partial status
to write, a `TrainingJobStatus` whose set fields are the merge patch (None deletes). The writer
(act/writer.py) sends it conditionally and applies the answer to the state."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import (
    Cause,
    ConditionStatus,
    ConditionType,
    FinishReason,
    PlacedReason,
    PreemptedReason,
    Reason,
    RecoveryReason,
    RestartReason,
    RunningReason,
    SizeReason,
    StalledReason,
    StragglingReason,
)
from railyard.operator.decide.builders import placement_status, selector
from railyard.operator.decide.conditions import is_true, set_condition, unchanged
from railyard.topology.api.job import (
    AvoidNode,
    CheckpointRecord,
    Condition,
    PlacementStatus,
    RestartRecord,
    StepTime,
    StragglerRecord,
    TrainingJobStatus,
    UnhealthyNode,
)
from railyard.topology.cluster.faults import LossReason
from railyard.topology.solver.placement import Placement

TRUE, FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE
AVOID_KEPT = 32  # status.avoidNodes (the CRD allows 64)


def _set(job: Job, conditions: list[Condition], type_: ConditionType, status: ConditionStatus, reason: Reason,
         message: str, now: datetime) -> list[Condition]:
    return set_condition(conditions, type_, status, reason, message, job.generation, now)


def below_desired(job: Job, conditions: list[Condition], placed: int, now: datetime) -> list[Condition]:
    """BelowDesired=True while an elastic job runs with fewer replicas than spec.replicas."""
    desired = job.desired_replicas or placed
    if placed < desired:
        return _set(job, conditions, ConditionType.BELOW_DESIRED, TRUE, SizeReason.SHRUNK,
                    f"{placed} of {desired} replicas placed", now)
    if is_true(conditions, ConditionType.BELOW_DESIRED):
        return _set(job, conditions, ConditionType.BELOW_DESIRED, FALSE, SizeReason.AT_DESIRED,
                    f"{placed} replicas placed", now)
    return conditions


# --- placing ------------------------------------------------------------------------------------------

_PLACED_BEFORE = (PlacedReason.BIND_TIMEOUT, PlacedReason.DEVICE_UNAVAILABLE, PlacedReason.NODE_LOST,
                  PlacedReason.STALE_PODS, PlacedReason.NAME_CONFLICT, PlacedReason.NO_REPLACEMENT,
                  PlacedReason.QUOTA_EXCEEDED)


def next_serial(job: Job) -> int:
    """The serial of the job's next placement. Statuses written before the counter existed named a
    restart's pods after the restart count, and a rolled-back first placement after nothing: start
    past both."""
    if "placements" in job.status.model_fields_set:
        return job.status.placements
    placed = job.condition(ConditionType.PLACED)
    if job.restart_count or job.placement is not None or (placed is not None and placed.reason in _PLACED_BEFORE):
        return job.restart_count + 1
    return 0

def placing(job: Job, placement: Placement, placement_id: str, now: datetime, priority: int,
            adopted: Sequence[tuple[str, str]] | None = None) -> TrainingJobStatus:
    """Record the placement, and the priority it was placed at: from then on its GPUs are taken (here and for
    a successor)."""
    message = (f"{len(placement.replicas)} replicas on {placement.tors} TORs, {placement.leaves} leaves, "
               f"{placement.spines} spines; {'rail-aligned' if placement.rail_aligned else 'not rail-aligned'}")
    conditions = _set(job, job.conditions, ConditionType.PLACED, TRUE, PlacedReason.PLACING, message, now)
    serial = next_serial(job)
    return TrainingJobStatus(
        placement=placement_status(placement, job.name, placement_id, serial, job.desired_replicas, priority,
                                   adopted),
        placements=serial + 1, replicas=len(placement.replicas), selector=selector(job.name), placed_at=now,
        queued_since=job.queued_since, conditions=below_desired(job, conditions, len(placement.replicas), now))


def constraint_key(message: str) -> str:
    """The binding constraint of an Unschedulable message without its live counts and without the
    tally of excluded nodes (context, which churns while nodes join or heartbeats lag): the
    condition and its Event change when the constraint changes, not every time a count moves."""
    return re.sub(r"\d+", "#", message.split("; excluded nodes:")[0])


def unplaced(job: Job, reason: PlacedReason, message: str, now: datetime) -> TrainingJobStatus | None:
    """Placed=False for `reason`; None when that reason is recorded already with the same binding constraint
    (only counts moved: no write, no Event)."""
    previous = job.condition(ConditionType.PLACED)
    if previous is not None and previous.reason == reason and \
            constraint_key(previous.message) == constraint_key(message):
        return None
    return TrainingJobStatus(queued_since=job.queued_since,
                             conditions=_set(job, job.conditions, ConditionType.PLACED, FALSE, reason, message, now))


def released(job: Job, now: datetime) -> TrainingJobStatus:
    """The whole gang is ungated: Placed=Released (the Placing message kept); a restart is over."""
    placed = job.condition(ConditionType.PLACED)
    conditions = _set(job, job.conditions, ConditionType.PLACED, TRUE, PlacedReason.RELEASED,
                      placed.message if placed is not None else "", now)
    patch: dict[str, object] = {"placement": PlacementStatus(released_at=now)}
    if is_true(conditions, ConditionType.RESTARTING):
        conditions = _set(job, conditions, ConditionType.RESTARTING, FALSE, RecoveryReason.RELEASED,
                          f"restart {job.restart_count} released", now)
        patch["last_restart"] = RestartRecord(released_at=now)
    if is_true(conditions, ConditionType.DEGRADED):
        conditions = _set(job, conditions, ConditionType.DEGRADED, FALSE, RecoveryReason.RECOVERED,
                          "every rank has a node again", now)
    if is_true(conditions, ConditionType.PREEMPTED):
        conditions = _set(job, conditions, ConditionType.PREEMPTED, FALSE, PreemptedReason.READMITTED,
                          "placed again after a preemption", now)
        patch["preempted_by"] = None
        patch["shrink_to"] = None
        patch["shrink_ranks"] = None
    return TrainingJobStatus(conditions=conditions, **patch)


def dropped(job: Job, reason: PlacedReason, message: str, now: datetime,
            avoid: Sequence[str] = (), avoid_until: datetime | None = None) -> TrainingJobStatus:
    """The placement is gone (refused, rolled back): its GPUs go back, the job waits again."""
    fields: dict[str, object] = {}
    if avoid:
        # Only unexpired entries, the most recent AVOID_KEPT: the list never grows without bound.
        kept = [a for a in job.status.avoid_nodes if a.node not in avoid and a.until is not None and a.until > now]
        fresh = [AvoidNode(node=n, reason=reason, until=avoid_until) for n in avoid]
        fields["avoid_nodes"] = (fresh + sorted(kept, key=lambda a: a.until or now, reverse=True))[:AVOID_KEPT]
    return TrainingJobStatus(placement=None, replicas=0,
                             conditions=_set(job, job.conditions, ConditionType.PLACED, FALSE, reason, message, now),
                             **fields)


def invalid(job: Job, reason: PlacedReason, message: str, now: datetime) -> TrainingJobStatus | None:
    """None when the job says so already."""
    if unchanged(job.conditions, ConditionType.PLACED, reason, message):
        return None
    return TrainingJobStatus(conditions=_set(job, job.conditions, ConditionType.PLACED, FALSE, reason, message, now))


# --- lifecycle ----------------------------------------------------------------------------------------

def running(job: Job, message: str, now: datetime, released_at: datetime | None = None) -> TrainingJobStatus:
    """Running=True; with `released_at` (the release this operator made and has not recorded yet) the
    release's record too, in the same write."""
    record = released(job, released_at) if released_at is not None else None
    conditions = _set(job, record.conditions if record is not None else job.conditions, ConditionType.RUNNING,
                      TRUE, RunningReason.ALL_RUNNING, message, now)
    fields = {} if record is None else {name: getattr(record, name) for name in record.model_fields_set
                                        if name != "conditions"}
    return TrainingJobStatus(start_time=job.status.start_time or now, conditions=conditions, **fields)


def finished(job: Job, succeeded: bool, reason: FinishReason, message: str, now: datetime,
             unhealthy: list[UnhealthyNode] | None = None, stop_running: bool = True) -> TrainingJobStatus:
    """Succeeded or Failed; Running=False with the same reason (`stop_running`)."""
    type_ = ConditionType.SUCCEEDED if succeeded else ConditionType.FAILED
    conditions = _set(job, job.conditions, type_, TRUE, reason, message, now)
    if stop_running and any(c.type == ConditionType.RUNNING for c in conditions):
        conditions = _set(job, conditions, ConditionType.RUNNING, FALSE, reason, message, now)
    fields: dict[str, object] = {} if unhealthy is None else {"unhealthy_nodes": unhealthy}
    return TrainingJobStatus(completion_time=now, conditions=conditions, **fields)


# --- restarts -----------------------------------------------------------------------------------------

def resume_point(checkpoint: CheckpointRecord | None) -> dict[str, object]:
    """The resume point a restart records (builders pass it to every rank of the new attempt)."""
    if checkpoint is None:
        return {"resume_step": None, "resume_checkpoint": None}
    return {"resume_step": checkpoint.step, "resume_checkpoint": checkpoint.path or ""}


def new_attempt(job: Job, cause: Cause, message: str, placement: Placement, placement_id: str, now: datetime,
                record: dict[str, object], checkpoint: CheckpointRecord | None, counted: bool = False,
                unhealthy: list[UnhealthyNode] | None = None,
                conditions: list[Condition] | None = None,
                straggler_evictions: list[datetime] | None = None,
                preemptions: list[datetime] | None = None,
                adopted: Sequence[tuple[str, str]] | None = None,
                kept: Mapping[int, str] | None = None) -> TrainingJobStatus:
    """A new attempt of the gang (write-ahead: an operator killed after this finishes it, see assess ->
    Resume): its placement in rank order, the restart record with the resume point, the conditions.
    `adopted`: an adopted gang's pods (name, uid) by rank; `kept`: the pods an in-place restart keeps, by rank."""
    restart_count = job.restart_count + 1
    current = job.placement
    conditions = _set(job, job.conditions if conditions is None else conditions, ConditionType.PLACED, TRUE,
                      PlacedReason.PLACING, message, now)
    if any(c.type == ConditionType.RUNNING for c in conditions):
        conditions = _set(job, conditions, ConditionType.RUNNING, FALSE, RunningReason.RESTARTING, message, now)
    conditions = _set(job, conditions, ConditionType.RESTARTING, TRUE, cause, message, now)
    if is_true(conditions, ConditionType.STRAGGLING):  # a new attempt is measured afresh
        conditions = _set(job, conditions, ConditionType.STRAGGLING, FALSE, StragglingReason.RESTARTED, message,
                          now)
    conditions = below_desired(job, conditions, len(placement.replicas), now)
    # A merge patch: what an earlier restart recorded and this one does not say is cleared (None), not kept.
    restart = {"reason": cause, "lost_nodes": [], "replacements": [], "moved_ranks": 0, "save_on_fault": None,
               "previous_replicas": len(current.ranks) if current is not None else 0, "detected_at": now,
               **record, "decided_at": now, "released_at": None, **resume_point(checkpoint)}
    fields: dict[str, object] = {}
    if unhealthy is not None:
        fields["unhealthy_nodes"] = unhealthy
    if checkpoint is not None:
        fields["last_checkpoint"] = checkpoint
    if straggler_evictions is not None:
        fields["straggler_evictions"] = straggler_evictions
    if cause == LossReason.MIGRATION:
        fields["last_migration"] = now
    if preemptions is not None:
        fields["preemptions"] = preemptions
    serial = next_serial(job)
    return TrainingJobStatus(
        placement=placement_status(placement, job.name, placement_id, serial,
                                   job.desired_replicas or len(placement.replicas),
                                   job.placement.priority if job.placement is not None else None, adopted, kept),
        placements=serial + 1, replicas=len(placement.replicas), restart_count=restart_count,
        process_restarts=job.status.process_restarts + (1 if counted else 0), stragglers=None,
        last_restart=RestartRecord(**restart), conditions=conditions, **fields)


def waiting_for_replacement(job: Job, unhealthy: list[UnhealthyNode], message: str, timeout: int,
                            now: datetime) -> TrainingJobStatus:
    conditions = _set(job, job.conditions, ConditionType.DEGRADED, TRUE, RecoveryReason.NO_REPLACEMENT,
                      f"{message}; waiting up to {timeout}s", now)
    return TrainingJobStatus(unhealthy_nodes=unhealthy, conditions=conditions)


def requeued(job: Job, cause: Cause, lost_names: list[str], unhealthy: list[UnhealthyNode], message: str,
             checkpoint: CheckpointRecord | None, now: datetime) -> TrainingJobStatus:
    """No replacement within the timeout: the whole gang is placed again, as a new attempt."""
    conditions = _set(job, job.conditions, ConditionType.PLACED, FALSE, PlacedReason.NO_REPLACEMENT, message, now)
    if any(c.type == ConditionType.RUNNING for c in conditions):
        conditions = _set(job, conditions, ConditionType.RUNNING, FALSE, RunningReason.NO_REPLACEMENT, message, now)
    conditions = _set(job, conditions, ConditionType.RESTARTING, TRUE, cause, message, now)
    conditions = _set(job, conditions, ConditionType.DEGRADED, TRUE, RecoveryReason.REQUEUED, message, now)
    current = job.placement
    detected = min((u.since for u in unhealthy if u.name in lost_names and u.since is not None), default=now)
    restart = RestartRecord(reason=cause, lost_nodes=lost_names, replacements=[],
                            moved_ranks=len(current.ranks) if current is not None else 0, detected_at=detected,
                            decided_at=now, released_at=None, save_on_fault=None, **resume_point(checkpoint))
    fields: dict[str, object] = {} if checkpoint is None else {"last_checkpoint": checkpoint}
    return TrainingJobStatus(placement=None, replicas=0, restart_count=job.restart_count + 1,
                             unhealthy_nodes=unhealthy, last_restart=restart, conditions=conditions,
                             **fields)


def preemption_chosen(job: Job, by: str, message: str, now: datetime, shrink_to: int | None = None,
                      shrink_ranks: list[int] | None = None) -> TrainingJobStatus:
    """Chosen as a victim: Preempted=True (SavingCheckpoint) while its ranks save a step; `shrink_to`:
    an elastic job is shrunk to that many replicas, dropping `shrink_ranks`, instead of being evicted."""
    conditions = _set(job, job.conditions, ConditionType.PREEMPTED, TRUE, PreemptedReason.SAVING, message, now)
    return TrainingJobStatus(conditions=conditions, preempted_by=by, shrink_to=shrink_to, shrink_ranks=shrink_ranks)


def recent_and_now(times: Sequence[datetime], now: datetime, hour: float = 3600.0) -> list[datetime]:
    """status.preemptions with this one: the last hour's, at most 16."""
    return [*(t for t in times if (now - t).total_seconds() < hour), now][-16:]


def shrunk_for_preemption(job: Job, message: str, now: datetime) -> list[Condition]:
    """The conditions of the attempt an elastic victim is shrunk to (act/attempts writes the rest)."""
    return _set(job, job.conditions, ConditionType.PREEMPTED, TRUE, PreemptedReason.SHRUNK, message, now)


def room_timed_out(until: datetime) -> TrainingJobStatus:
    """Its hold timed out: no new room (victims, moves) is made for it before `until`."""
    return TrainingJobStatus(room_retry_after=until)


def preemption_cancelled(job: Job, message: str, now: datetime) -> TrainingJobStatus:
    conditions = _set(job, job.conditions, ConditionType.PREEMPTED, FALSE, PreemptedReason.CANCELLED, message, now)
    return TrainingJobStatus(conditions=conditions, preempted_by=None, shrink_to=None, shrink_ranks=None)


def preempted(job: Job, message: str, checkpoint: CheckpointRecord | None, now: datetime,
              hour: float = 3600.0) -> TrainingJobStatus:
    """Evicted whole for a higher-priority gang: re-queued (never failed, never counted against
    maxRestarts), to resume from its last committed checkpoint."""
    conditions = _set(job, job.conditions, ConditionType.PLACED, FALSE, PlacedReason.PREEMPTED, message, now)
    if any(c.type == ConditionType.RUNNING for c in conditions):
        conditions = _set(job, conditions, ConditionType.RUNNING, FALSE, RunningReason.PREEMPTED, message, now)
    conditions = _set(job, conditions, ConditionType.RESTARTING, TRUE, RestartReason.PREEMPTED, message, now)
    conditions = _set(job, conditions, ConditionType.PREEMPTED, TRUE, PreemptedReason.PREEMPTED, message, now)
    current = job.placement
    restart = RestartRecord(reason=RestartReason.PREEMPTED, lost_nodes=[], replacements=[],
                            moved_ranks=len(current.ranks) if current is not None else 0, detected_at=now,
                            decided_at=now, released_at=None, save_on_fault=None, **resume_point(checkpoint))
    fields: dict[str, object] = {} if checkpoint is None else {"last_checkpoint": checkpoint}
    return TrainingJobStatus(placement=None, replicas=0, restart_count=job.restart_count + 1, last_restart=restart,
                             conditions=conditions, preemptions=recent_and_now(job.status.preemptions, now, hour),
                             **fields)


def no_room_to_grow(job: Job, message: str, now: datetime) -> TrainingJobStatus | None:
    if unchanged(job.conditions, ConditionType.BELOW_DESIRED, SizeReason.NO_CAPACITY, message):
        return None
    return TrainingJobStatus(conditions=_set(job, job.conditions, ConditionType.BELOW_DESIRED, TRUE,
                                             SizeReason.NO_CAPACITY, message, now))


def shrunk_conditions(job: Job, message: str, now: datetime) -> list[Condition]:
    return _set(job, job.conditions, ConditionType.DEGRADED, FALSE, RecoveryReason.SHRUNK, message, now)


# --- what the reports add up to ----------------------------------------------------------------------

def straggling_conditions(job: Job, verdict: tuple[StragglingReason, str] | None,
                          now: datetime) -> list[Condition] | None:
    """The Straggling condition for this verdict, or None when it says so already."""
    current = job.condition(ConditionType.STRAGGLING)
    if verdict is not None:
        reason, message = verdict
        if unchanged(job.conditions, ConditionType.STRAGGLING, reason, message):
            return None
        return _set(job, job.conditions, ConditionType.STRAGGLING, TRUE, reason, message, now)
    if current is not None and current.status == TRUE:
        return _set(job, job.conditions, ConditionType.STRAGGLING, FALSE, StragglingReason.NO_STRAGGLERS,
                    "every node within the threshold", now)
    return None


def step_time(p50: float, p90: float | None, samples: int, now: datetime) -> StepTime:
    return StepTime(p50_seconds=round(p50, 4), p90_seconds=round(p90 or p50, 4), samples=samples, updated_at=now)


def stragglers_changed(before: list[StragglerRecord] | None, after: list[StragglerRecord]) -> bool:
    """Compared without the score, which moves with every report."""
    def shape(records: list[StragglerRecord]) -> list[tuple[object, ...]]:
        return [(r.node, tuple(r.ranks), r.since, r.action) for r in records]
    return shape(before or []) != shape(after)


def partitioned(job: Job, message: str, now: datetime) -> TrainingJobStatus:
    return TrainingJobStatus(conditions=_set(job, job.conditions, ConditionType.DEGRADED, TRUE,
                                             RecoveryReason.PARTITION, message, now))


def partition_cleared(job: Job, now: datetime) -> TrainingJobStatus:
    return TrainingJobStatus(conditions=_set(job, job.conditions, ConditionType.DEGRADED, FALSE,
                                             RecoveryReason.RECOVERED, "the partition cleared", now))


def restart_capped(job: Job, message: str, now: datetime) -> TrainingJobStatus | None:
    if unchanged(job.conditions, ConditionType.DEGRADED, RecoveryReason.RESTART_CAP, message):
        return None
    return TrainingJobStatus(conditions=_set(job, job.conditions, ConditionType.DEGRADED, TRUE,
                                             RecoveryReason.RESTART_CAP, message, now))


def internal_error(job: Job, message: str, now: datetime) -> TrainingJobStatus | None:
    """Placed=False InternalError without a placement, Stalled=True with one; None if it says so."""
    if job.placement is None:
        if unchanged(job.conditions, ConditionType.PLACED, PlacedReason.INTERNAL_ERROR, message):
            return None
        return TrainingJobStatus(conditions=_set(job, job.conditions, ConditionType.PLACED, FALSE,
                                                 PlacedReason.INTERNAL_ERROR, message, now))
    if unchanged(job.conditions, ConditionType.STALLED, StalledReason.INTERNAL_ERROR, message):
        return None
    return TrainingJobStatus(conditions=_set(job, job.conditions, ConditionType.STALLED, TRUE,
                                             StalledReason.INTERNAL_ERROR, message, now))


def internal_error_cleared(job: Job, now: datetime) -> TrainingJobStatus:
    return TrainingJobStatus(conditions=_set(job, job.conditions, ConditionType.STALLED, FALSE,
                                             StalledReason.RECOVERED, "the last step succeeded", now))
