"""Request slots with a fast lane (kube/slots.py): the capacity is never exceeded, urgent waiters go
before plain ones, each lane in its own order, and a cancelled waiter neither holds nor leaks a slot."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.operator.kube.slots import URGENT, Slots


def test_an_urgent_waiter_is_let_in_before_the_plain_ones_that_queued_first():
    async def scenario() -> list[str]:
        slots = Slots(1)
        order: list[str] = []
        gate = asyncio.Event()

        async def holder() -> None:
            async with slots:
                await gate.wait()

        async def request(name: str, urgent: bool) -> None:
            URGENT.set(urgent)  # this task's own context
            async with slots:
                order.append(name)

        first = asyncio.create_task(holder())
        await asyncio.sleep(0)
        waiters = [asyncio.create_task(request(name, urgent)) for name, urgent in
                   [("plain-1", False), ("plain-2", False), ("urgent-1", True), ("urgent-2", True)]]
        await asyncio.sleep(0)
        assert slots.held == 1 and slots.waiting == 4
        gate.set()
        await asyncio.gather(first, *waiters)
        assert slots.held == 0 and slots.waiting == 0
        return order

    assert asyncio.run(scenario()) == ["urgent-1", "urgent-2", "plain-1", "plain-2"]


def test_a_plain_request_does_not_overtake_waiters_and_a_free_slot_is_taken_at_once():
    async def scenario() -> None:
        slots = Slots(2)
        await slots.acquire()
        await slots.acquire()
        plain = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0)
        slots.release()  # handed to the waiter, not left for whoever asks next
        await asyncio.sleep(0)
        assert plain.done() and slots.held == 2
        slots.release()
        await asyncio.wait_for(slots.acquire(), 1)  # a free slot and nobody waiting: no wait
        assert slots.held == 2

    asyncio.run(scenario())


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 4),
       requests=st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.booleans()), min_size=1, max_size=24))
def test_the_capacity_holds_and_every_request_not_cancelled_gets_in(capacity: int,
                                                                     requests: list[tuple[bool, int, bool]]):
    """requests: (urgent, how many loop turns it holds the slot, cancelled while it waits)."""
    async def scenario() -> None:
        slots = Slots(capacity)
        most = 0
        served: list[int] = []

        async def request(i: int, urgent: bool, turns: int) -> None:
            nonlocal most
            URGENT.set(urgent)
            async with slots:
                most = max(most, slots.held)
                served.append(i)
                for _ in range(turns):
                    await asyncio.sleep(0)

        tasks = [asyncio.create_task(request(i, urgent, turns)) for i, (urgent, turns, _) in enumerate(requests)]
        await asyncio.sleep(0)
        cancelled = {i for i, (_, _, cancel) in enumerate(requests) if cancel and not tasks[i].done()
                     and i not in served}
        for i in cancelled:
            tasks[i].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert most <= capacity
        assert slots.held == 0 and slots.waiting == 0
        assert set(served) >= set(range(len(requests))) - cancelled

    asyncio.run(scenario())
