"""SIGTERM handling: Kubernetes sends SIGTERM, waits terminationGracePeriodSeconds, then SIGKILLs.
The operator deletes an attempt gracefully, so a script that checks the flag at step boundaries
can save a checkpoint (and report it) before it exits."""

from __future__ import annotations

import signal
import threading
from types import FrameType


class StopFlag:
    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal: int | None = None

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, signum: int | None = None) -> None:
        self.signal = signum
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    @classmethod
    def install(cls, signals: tuple[int, ...] = (signal.SIGTERM,)) -> StopFlag:
        """Set the flag on these signals instead of dying (main thread only, as Python requires)."""
        flag = cls()

        def handler(signum: int, _frame: FrameType | None) -> None:
            flag.request(signum)

        for s in signals:
            signal.signal(s, handler)
        return flag
