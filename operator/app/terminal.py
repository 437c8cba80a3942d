"""What a person at a terminal sees while a `railyard` command works: one progress line on stderr,
shown only on a TTY and only once the command has run for a moment (scripts and pipes get none)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, delay: float = 1.0, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.delay = delay
        self._started = time.monotonic()
        self._shown = False

    def __call__(self, message: str) -> None:
        """The current step ("listing pods: 12,000"), replacing the line shown before."""
        if not self.enabled or time.monotonic() - self._started < self.delay:
            return
        self.stream.write(f"\r\033[K{message}")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False


def quiet(_message: str) -> None:
    """A progress sink that shows nothing."""
