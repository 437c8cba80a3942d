"""The parts every actor shares: the state, the API, settings, the clock, per-job memory, the
report book, and the request limit (at most `api.workers` requests of the actors in flight)."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from railyard.operator.base.clock import Clock
from railyard.operator.base.settings import Settings
from railyard.operator.cache.evictions import EvictionBook
from railyard.operator.cache.memory import Memories
from railyard.operator.cache.progress_book import ProgressBook
from railyard.operator.cache.state import ClusterState
from railyard.operator.kube.protocol import ClusterApi
from railyard.operator.kube.slots import Slots

log = logging.getLogger("railyard.act")
T = TypeVar("T")


@dataclass
class Context:
    state: ClusterState
    api: ClusterApi
    settings: Settings
    clock: Clock
    book: ProgressBook = field(default_factory=ProgressBook)
    evictions: EvictionBook = field(default_factory=EvictionBook)
    memories: Memories = field(default_factory=Memories)
    # When this replica's leadership began (monotonic): the ranks report to the leader only, so what its book
    # has not heard since then says nothing about whether they report (decide/checkpoint_wait.nobody_reports).
    listening_since: float = float("-inf")
    _limit: Slots | None = field(default=None, repr=False)

    async def limited(self, call: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run one API call within the request limit. The call is made only once a slot is had, so a
        pass cancelled meanwhile leaves no coroutine that was never awaited."""
        if self._limit is None:
            self._limit = Slots(self.settings.api.workers)
        async with self._limit:
            return await call(*args, **kwargs)

    def crash_point(self, name: str) -> None:
        """Fault injection for the crash-safety e2e test (RAILYARD_TEST_CRASH_AFTER)."""
        if self.settings.crash_after == name:
            log.warning("RAILYARD_TEST_CRASH_AFTER=%s: exiting now (fault injection)", name)
            os._exit(17)
