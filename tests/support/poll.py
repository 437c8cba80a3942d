"""Polling with a deadline: the only way tests wait for the cluster (never fixed sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar, cast

T = TypeVar("T")


class Timeout(AssertionError):
    pass


def poll(check: Callable[[], T | bool | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Call `check` until it returns something truthy; fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = check()
        except Exception as e:
            last = e
        else:
            last = value
            if value:
                return cast(T, value)
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)
