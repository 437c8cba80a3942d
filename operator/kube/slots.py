"""Request slots with a fast lane: at most `capacity` holders at once, and a waiter whose context says
`URGENT` is let in before every plain waiter (in its own arrival order; nobody already holding a slot is
interrupted). A 128-pod gang's creates queue 128 waiters on the request limit; a one-pod job's create
behind them waited for the whole gang. The release line marks the small gangs it starts beside a larger
one as urgent (act/release_line.py).

Pure asyncio; the same class bounds the actors' requests (act/actor_context.py) and the transport's
connections (kube/async_http.py), so the mark counts at both.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextvars import ContextVar
from types import TracebackType

# Set for the duration of a small gang's materialisation; tasks it starts inherit it (asyncio copies
# the context into each new task).
URGENT: ContextVar[bool] = ContextVar("railyard_urgent_requests", default=False)


class Slots:
    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.held = 0
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._plain: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._urgent if not f.done()) + sum(1 for f in self._plain if not f.done())

    async def acquire(self) -> None:
        urgent = URGENT.get()
        if self.held < self.capacity and not self._live(self._urgent) and (urgent or not self._live(self._plain)):
            self.held += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._urgent if urgent else self._plain).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # the slot was handed over just as it was cancelled
                self.release()
            raise

    def release(self) -> None:
        self.held -= 1
        while self.held < self.capacity:
            line = self._urgent if self._live(self._urgent) else self._plain
            if not self._live(line):
                return
            waiter = line.popleft()
            self.held += 1  # handed over: the waiter holds it when it wakes
            waiter.set_result(None)

    @staticmethod
    def _live(line: deque[asyncio.Future[None]]) -> bool:
        """Whether the line has a waiter still waiting; cancelled ones at its head are dropped."""
        while line and line[0].done():
            line.popleft()
        return bool(line)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        self.release()
