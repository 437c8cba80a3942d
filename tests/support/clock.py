"""A clock a test sets and moves (the operator's Clock protocol): both readings advance together."""

from __future__ import annotations


class ManualClock:
    def __init__(self, wall: float = 1_800_000_000.0, mono: float = 1000.0) -> None:
        self.wall = wall
        self.mono = mono

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds
