"""A new leader's catch-up (act/loop.py, app/handlers.py): begun as soon as it leads, while kinds are still being
listed, and no pass runs before it is through; a failed one is begun again; a term that ends stops it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from railyard.operator.act.loop import PlacementLoop

from tests.support.harness import rig


async def _until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        await asyncio.sleep(0.01)


def _loop(catch_up: Any, leader: Callable[[], bool] = lambda: True) -> tuple[PlacementLoop, list[bool], Any]:
    r = rig(nodes=2)
    r.state.synced.discard("pods")  # the pods' list is still streaming in
    loop = PlacementLoop(r.state, r.api, r.loop.ctx.settings, leader, clock=r.clock, catch_up=catch_up)
    passes: list[bool] = []

    async def counted(wait: bool = True) -> None:
        passes.append(r.state.ready)

    loop.run_once = counted  # type: ignore[method-assign]
    return loop, passes, r.state


def test_the_catch_up_begins_before_every_kind_is_listed_and_no_pass_runs_before_it_is_through() -> None:
    began, finish = asyncio.Event(), asyncio.Event()

    async def catch_up() -> None:
        began.set()
        await finish.wait()

    loop, passes, state = _loop(catch_up)
    asked: list[bool] = []
    has_caught_up = loop._has_caught_up

    def watched() -> bool:
        asked.append(state.ready)
        return has_caught_up()

    loop._has_caught_up = watched  # type: ignore[method-assign]

    async def scenario() -> None:
        task = asyncio.create_task(loop.run())
        loop.wake()
        await _until(began.is_set, "the catch-up begun while a kind is not listed")
        assert not state.ready
        state.synced.add("pods")
        loop.wake()
        await _until(lambda: True in asked, "a pass's turn with every kind listed")
        assert passes == [], "no pass before the catch-up is through"
        finish.set()
        await _until(lambda: bool(passes), "a pass once caught up")
        assert passes[0] is True
        task.cancel()

    asyncio.run(scenario())


def test_a_failed_catch_up_is_begun_again_and_placing_waits_for_it() -> None:
    tries: list[int] = []

    async def catch_up() -> None:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("API server unreachable")

    loop, passes, state = _loop(catch_up)
    state.synced.add("pods")

    async def scenario() -> None:
        task = asyncio.create_task(loop.run())
        loop.wake()
        await _until(lambda: len(tries) == 1 and loop._catching_up is None, "the first catch-up failed")
        assert passes == []
        loop.wake()  # the next event (or the resync interval)
        await _until(lambda: bool(passes), "a pass after the second catch-up")
        assert len(tries) == 2
        task.cancel()

    asyncio.run(scenario())


def test_a_term_that_ends_during_the_catch_up_stops_it() -> None:
    leading = [True]
    cancelled = asyncio.Event()

    async def catch_up() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    loop, passes, _ = _loop(catch_up, lambda: leading[0])

    async def scenario() -> None:
        task = asyncio.create_task(loop.run())
        loop.wake()
        await _until(lambda: loop._catching_up is not None, "the catch-up begun")
        leading[0] = False
        loop.wake()
        await _until(cancelled.is_set, "the catch-up stopped with the term")
        assert passes == []
        task.cancel()

    asyncio.run(scenario())
