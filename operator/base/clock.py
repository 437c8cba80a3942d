"""The operator's clock, injected everywhere time is read, so tests move time instead of patching
the standard library.

Two readings: `time()` (wall clock, seconds since the epoch) for what is written to objects and
compared with the API server's timestamps, `monotonic()` for intervals this process measures itself
(debounce windows, flush periods, lease terms)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


def utc(seconds: float) -> datetime:
    """A timestamp for status and events: whole seconds, UTC (as the API server writes them)."""
    return datetime.fromtimestamp(int(seconds), UTC)
