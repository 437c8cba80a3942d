"""The release line that orders gang materialisation: strict order, a pod budget, cancellation."""

from __future__ import annotations

import asyncio

import pytest
from railyard.operator.act.release_line import ReleaseLine
from railyard.operator.kube.slots import URGENT


def _gangs(queue: ReleaseLine, sizes: list[int], log: list[str], hold: dict[int, asyncio.Event]) -> list:
    async def gang(i: int, size: int) -> None:
        async def step() -> None:
            log.append(f"start {i}")
            await hold[i].wait()
            log.append(f"end {i}")
        await queue.run(size, step)
    return [gang(i, size) for i, size in enumerate(sizes)]


def test_gangs_start_in_order_within_the_budget_and_a_large_one_is_not_overtaken():
    async def scenario() -> list[str]:
        queue = ReleaseLine(budget=4)
        log: list[str] = []
        hold = {i: asyncio.Event() for i in range(4)}
        tasks = [asyncio.create_task(c) for c in _gangs(queue, [3, 6, 1, 1], log, hold)]
        await asyncio.sleep(0)
        assert log == ["start 0"], "gang 1 (6 > budget 4) waits for nothing in flight; 2 and 3 wait behind it"
        assert queue.in_flight == 3 and queue.waiting == 3
        hold[0].set()
        await asyncio.sleep(0.01)
        assert log[-1] == "start 1" and queue.in_flight == 6, "alone, over the budget"
        hold[1].set()
        await asyncio.sleep(0.01)
        assert log[-2:] == ["start 2", "start 3"], "both fit together"
        hold[2].set()
        hold[3].set()
        await asyncio.gather(*tasks)
        assert queue.in_flight == 0 and queue.waiting == 0
        return log

    log = asyncio.run(scenario())
    assert log.index("start 2") > log.index("end 1")


@pytest.mark.parametrize("line_moves_first", [False, True])
def test_a_cancelled_waiter_does_not_block_the_line_and_a_failing_step_frees_its_pods(line_moves_first: bool):
    async def scenario() -> None:
        queue = ReleaseLine(budget=2)
        log: list[str] = []
        hold = {i: asyncio.Event() for i in range(3)}
        tasks = [asyncio.create_task(c) for c in _gangs(queue, [2, 2, 2], log, hold)]
        await asyncio.sleep(0)
        # Gang 1 waits behind gang 0 and is cancelled; with line_moves_first, gang 0 finishes and
        # moves the line before gang 1 sees its cancellation (it must not count as in flight).
        if line_moves_first:
            hold[0].set()
            tasks[1].cancel()
        else:
            tasks[1].cancel()
            hold[0].set()
        await asyncio.sleep(0.01)
        assert log == ["start 0", "end 0", "start 2"] and queue.in_flight == 2

        async def boom() -> None:
            raise RuntimeError("refused")
        hold[2].set()
        await asyncio.gather(tasks[0], tasks[2])
        with pytest.raises(RuntimeError):
            await queue.run(2, boom)
        assert queue.in_flight == 0 and queue.waiting == 0

    asyncio.run(scenario())


def test_a_small_gang_goes_beside_a_large_one_in_flight_and_never_holds_up_one_waiting_for_an_empty_line():
    async def scenario() -> tuple[list[str], list[bool]]:
        queue = ReleaseLine(budget=4, express=2)
        log: list[str] = []
        urgent: list[bool] = []
        hold = {i: asyncio.Event() for i in range(5)}

        async def gang(i: int, size: int) -> None:
            async def step() -> None:
                log.append(f"start {i}")
                urgent.append(URGENT.get())
                await hold[i].wait()
                log.append(f"end {i}")
            await queue.run(size, step)

        # 0: in flight; 1: larger than the budget, waits for an empty line; 2 and 3: one pod each, beside
        # them (the lane's two pods); 4: one pod more than the lane holds, so it joins the line behind 1.
        tasks = [asyncio.create_task(gang(i, size)) for i, size in enumerate([3, 6, 1, 1, 1])]
        await asyncio.sleep(0)
        assert log == ["start 0", "start 2", "start 3"] and queue.express_in_flight == 2 and queue.in_flight == 3
        hold[2].set()
        hold[0].set()
        await asyncio.sleep(0.01)
        assert log[-1] == "start 1", "the lane's gang 3 still runs, yet the large gang starts: it does not count"
        for i in (1, 3, 4):
            hold[i].set()
        await asyncio.gather(*tasks)
        assert queue.in_flight == 0 and queue.express_in_flight == 0
        return log, urgent

    log, urgent = asyncio.run(scenario())
    assert log.index("start 4") > log.index("end 1"), "the lane was full: it waited in line"
    assert urgent == [False, True, True, False, False], "only the lane's gangs' requests go first"
    assert URGENT.get() is False


def test_a_large_gangs_few_new_pods_wait_in_line_and_a_gang_of_nothing_to_make_never_takes_the_lane():
    async def scenario() -> list[bool]:
        queue = ReleaseLine(budget=4, express=2)
        urgent: list[bool] = []

        async def step() -> None:
            urgent.append(URGENT.get())
        await queue.run(1, step, gang=128)  # one lost rank of a 128-pod gang
        await queue.run(0, step, gang=0)
        await queue.run(1, step, gang=1)
        return urgent

    assert asyncio.run(scenario()) == [False, False, True]
