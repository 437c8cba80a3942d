"""Status conditions keyed by type, as the Kubernetes API conventions want them."""

from __future__ import annotations

from typing import Any

from railyard.topology.timestamps import iso

PLACED, RUNNING, SUCCEEDED, FAILED = "Placed", "Running", "Succeeded", "Failed"
# Recovery: Restarting from a restart decision until the new generation is released; Degraded while
# lost ranks have no replacement yet (waiting for capacity, or re-queued).
RESTARTING, DEGRADED = "Restarting", "Degraded"
BELOW_DESIRED = "BelowDesired"  # an elastic job runs with fewer replicas than spec.replicas
STRAGGLING = "Straggling"  # True: a node is slow for minDurationSeconds (Slow) or a whole TOR is (Network)


def now_iso() -> str:
    return iso()


def get(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def is_true(conditions: list[dict[str, Any]] | None, type_: str) -> bool:
    c = get(conditions, type_)
    return bool(c and c.get("status") == "True")


def unchanged(conditions: list[dict[str, Any]] | None, type_: str, reason: str, message: str) -> bool:
    """True if the condition already says exactly this (avoids status churn and duplicate events)."""
    c = get(conditions, type_)
    return bool(c and c.get("reason") == reason and c.get("message") == message)


def set_condition(conditions: list[dict[str, Any]] | None, type_: str, status: str, reason: str, message: str,
                  generation: int | None, now: str | None = None) -> list[dict[str, Any]]:
    """A new list with `type_` set; lastTransitionTime changes only when the status does."""
    now = now or now_iso()
    out = [dict(c) for c in conditions or [] if c.get("type") != type_]
    previous = get(conditions, type_)
    changed = previous is None or previous.get("status") != status
    out.append({
        "type": type_, "status": status, "reason": reason, "message": message[:32000],
        "lastTransitionTime": now if changed or previous is None else previous.get("lastTransitionTime", now),
        "observedGeneration": generation,
    })
    # Most advanced first: the CRD's State column prints the first True condition.
    order = {FAILED: 0, SUCCEEDED: 1, RUNNING: 2, PLACED: 3}
    out.sort(key=lambda c: order.get(c["type"], 9))
    return out


def state_of(conditions: list[dict[str, Any]] | None) -> str:
    """One word for metrics and the CLI: Succeeded, Failed, Running, Placed, Queued."""
    for type_ in (SUCCEEDED, FAILED, RUNNING):
        if is_true(conditions, type_):
            return type_
    if is_true(conditions, PLACED):
        return PLACED
    return "Queued"
