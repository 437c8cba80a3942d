"""RFC 3339 timestamps as the Kubernetes API writes them ("2026-01-01T00:00:00Z")."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any


def epoch(timestamp: str | None, default: float) -> float:
    """Seconds since the epoch; `default` when there is no timestamp."""
    if not timestamp:
        return default
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def iso(seconds: float | None = None) -> str:
    """A timestamp for status and events (whole seconds, UTC); now by default."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if seconds is None else seconds))


def parse_time(timestamp: Any) -> datetime | None:
    """A timestamp as a UTC datetime; None when absent or unreadable."""
    if isinstance(timestamp, datetime):
        return timestamp if timestamp.tzinfo else timestamp.replace(tzinfo=UTC)
    if not timestamp or not isinstance(timestamp, str):
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
