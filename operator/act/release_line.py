"""The line placed gangs wait in to be materialised (pods created, then released).

Gangs take their turn strictly in the order they joined the line, with at most `budget` pods in
flight; one larger than the budget waits until nothing is in flight and goes alone. Two orders were
measured and dropped (README, `make compare`): all gangs at once queued every gang's creates on the
request limit ahead of the first gang's releases (nothing bound for ~12 s of a burst), and letting
smaller gangs overtake one that did not fit kept the largest gangs waiting until everything else was
through (they set the p99). The placer decides who joins first (smallest gangs of a pass).

Beside the line, an express lane: a gang of at most `express` pods starts at once while the lane's own
`express` pods leave room, its requests marked urgent (kube/slots.py), and it does not count as in flight
for the line, so a large gang waiting for an empty line is not kept waiting by it. In the line, a one-pod
job placed just after a 128-pod gang was created only once that gang's creates and releases were through.
(Measured alone on seed 12 it moved no figure: the small jobs' slowest waits there are kube-scheduler and the
API server binding a large gang released in the same second; with passes that place an arriving job at once,
docs/records/arrivals-2026-12-07.md, it keeps such a job from waiting in line for that gang.)

Pure asyncio, no API access: the caller passes the step to run when the turn comes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from railyard.operator.kube.slots import URGENT

T = TypeVar("T")


class ReleaseLine:
    def __init__(self, budget: int, express: int = 0) -> None:
        self.budget = max(1, budget)
        self.express = max(0, express)
        self.in_flight = 0
        self.express_in_flight = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def run(self, size: int, step: Callable[[], Awaitable[T]], gang: int | None = None) -> T:
        """Wait for this gang's turn, then run `step()`; its `size` pods count as in flight until
        the step returns or raises. A cancelled waiter gives up its place without blocking the line.
        `gang`: the whole gang's pods when the step makes only some (a restart's lost ranks): the express
        lane is for small gangs, not for a large one's few new pods (its kept pods are relabelled too)."""
        whole = size if gang is None else gang
        if 0 < whole <= self.express - self.express_in_flight:
            self.express_in_flight += whole
            token = URGENT.set(True)
            try:
                return await step()
            finally:
                URGENT.reset(token)
                self.express_in_flight -= whole
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, started)
        self._waiting.append(entry)
        self._advance()
        try:
            await started
        except asyncio.CancelledError:
            if started.done() and not started.cancelled():  # its turn had come just as it was cancelled
                self.in_flight -= size
            elif entry in self._waiting:  # (_advance may have dropped it already)
                self._waiting.remove(entry)
            self._advance()
            raise
        try:
            return await step()
        finally:
            self.in_flight -= size
            self._advance()

    def _advance(self) -> None:
        """Start gangs from the head of the line while they fit; never one behind a waiting gang."""
        while self._waiting:
            size, started = self._waiting[0]
            if started.cancelled():
                self._waiting.popleft()
                continue
            if self.in_flight and self.in_flight + size > self.budget:
                return
            self._waiting.popleft()
            self.in_flight += size
            started.set_result(None)
