"""Status conditions keyed by type, as the Kubernetes API conventions want them: one per type,
lastTransitionTime moving only when the status does, the most advanced first (the CRD's State
column prints the first True condition)."""

from __future__ import annotations

from datetime import datetime

from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import ConditionStatus, ConditionType, PreemptedReason, Reason
from railyard.topology.api.job import Condition

MESSAGE_LIMIT = 32000
_ORDER: dict[str, int] = {ConditionType.FAILED: 0, ConditionType.SUCCEEDED: 1, ConditionType.RUNNING: 2,
                          ConditionType.PLACED: 3}


def get(conditions: list[Condition], type_: ConditionType) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: list[Condition], type_: ConditionType) -> bool:
    c = get(conditions, type_)
    return c is not None and c.status == ConditionStatus.TRUE


def saving_for_preemption(job: Job) -> bool:
    """A victim whose ranks save a step before it is evicted (Preempted=True, SavingCheckpoint)."""
    condition = job.condition(ConditionType.PREEMPTED)
    return condition is not None and condition.status == ConditionStatus.TRUE and \
        condition.reason == PreemptedReason.SAVING


def unchanged(conditions: list[Condition], type_: ConditionType, reason: Reason, message: str) -> bool:
    """True if the condition already says exactly this (avoids status churn and duplicate events)."""
    c = get(conditions, type_)
    return c is not None and c.reason == reason and c.message == message


def set_condition(conditions: list[Condition], type_: ConditionType, status: ConditionStatus, reason: Reason,
                  message: str, generation: int | None, now: datetime) -> list[Condition]:
    """A new list with `type_` set; lastTransitionTime changes only when the status does."""
    previous = get(conditions, type_)
    changed = previous is None or previous.status != status
    out = [c for c in conditions if c.type != type_]
    out.append(Condition(type=type_, status=status, reason=reason, message=message[:MESSAGE_LIMIT],
                         last_transition_time=now if changed or previous is None or
                         previous.last_transition_time is None else previous.last_transition_time,
                         observed_generation=generation))
    out.sort(key=lambda c: _ORDER.get(c.type, 9))  # StrEnum members hash as their strings
    return out
