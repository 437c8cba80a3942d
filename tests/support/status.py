"""Reading (and, for a test's own setup, writing) conditions in the raw status the API server holds
— the truth a test checks, not the operator's typed view of it."""

from __future__ import annotations

from typing import Any

from railyard.operator.base.reasons import ConditionType

PLACED, RUNNING, SUCCEEDED, FAILED = (ConditionType.PLACED, ConditionType.RUNNING, ConditionType.SUCCEEDED,
                                      ConditionType.FAILED)
RESTARTING, DEGRADED, BELOW_DESIRED, STRAGGLING = (ConditionType.RESTARTING, ConditionType.DEGRADED,
                                                   ConditionType.BELOW_DESIRED, ConditionType.STRAGGLING)


def get(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def is_true(conditions: list[dict[str, Any]] | None, type_: str) -> bool:
    c = get(conditions, type_)
    return bool(c and c.get("status") == "True")


def set_condition(conditions: list[dict[str, Any]] | None, type_: str, status: str, reason: str, message: str,
                  generation: int | None, now: str = "2026-01-01T00:00:00Z") -> list[dict[str, Any]]:
    """A test's own write of a condition (e.g. a job someone marked finished)."""
    out = [dict(c) for c in conditions or [] if c.get("type") != type_]
    out.append({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now,
                "observedGeneration": generation})
    return out
