"""What a pass skips on a busy cluster, and that each skip ends when what it stood on changes: a
finished job's Done (cache/memory.JobMemory.done), a job's unchanged addresses (endpoints_checked), a
steady running gang's Wait (steady: a node's signal or an eviction asked for ends it)."""

from __future__ import annotations

import copy

from tests.support.harness import rig
from tests.support.jobs import make_job
from tests.support.nodes import cordon, not_ready


def _finished(r, name: str) -> None:
    r.submit(make_job(name, 2))
    r.running()
    r.step()
    r.succeed_all()
    r.step(3)
    assert r.reason(name, "Succeeded") is not None


def test_a_finished_jobs_skip_ends_when_a_live_pod_of_it_appears():
    r = rig(nodes=4)
    _finished(r, "over")
    assert r.loop.ctx.memories.recall(r.state.jobs[("default", "over")]).done is not None, "skipped from now on"
    stray = copy.deepcopy(r.api.objects["pods"][("default", "over-0")])
    stray["metadata"]["name"] = "over-0-stray"
    stray["metadata"].pop("uid")
    stray["status"]["phase"] = "Running"
    r.api._store("pods", stray, "ADDED")  # a pod of the finished job, alive (a late create, a stuck one)
    r.deliver()
    r.step(2)
    assert "over-0-stray" in {name for name, _ in r.api.deletions}, "cleaned up as before the skip existed"


def test_a_finished_jobs_skip_ends_when_the_job_changes():
    r = rig(nodes=4)
    _finished(r, "edited")
    key = ("default", "edited")
    before = r.loop.ctx.memories.recall(r.state.jobs[key]).done
    body = copy.deepcopy(r.api.objects["trainingjobs"][key])
    body["metadata"].setdefault("labels", {})["touched"] = "yes"
    r.api._store("trainingjobs", body, "MODIFIED")
    r.deliver()
    r.step()
    after = r.loop.ctx.memories.recall(r.state.jobs[key]).done
    assert before is not None and after is not None and after != before, "assessed again, and Done again"


def _steady(r, name: str):
    r.submit(make_job(name, 2))
    r.running()
    r.step(2)
    job = r.state.jobs[("default", name)]
    assert r.loop.ctx.memories.recall(job).steady is not None, "a running gang with pristine nodes is skipped"
    return job


def test_a_steady_gangs_skip_ends_when_a_node_goes_dark_and_the_loss_comes_after_its_grace():
    r = rig(nodes=4)
    job = _steady(r, "steady")
    node = r.nodes_of("steady")[0]
    not_ready(r.api, r.state, node, seen_ago=0)
    r.step()
    assert r.status("steady").get("restartCount", 0) == 0, "inside the grace: nothing yet"
    r.clock.advance(job.fault_policy.node_loss_grace_seconds + 1)
    r.step()  # no event since the node went dark: only time passed
    assert r.status("steady").get("restartCount", 0) == 1, "the loss came after its grace"
    assert node not in r.nodes_of("steady")


def test_a_steady_gangs_skip_ends_when_an_eviction_of_its_pod_on_a_cordoned_node_is_asked_for():
    r = rig(nodes=4)
    _steady(r, "drained")
    node = r.nodes_of("drained")[0]
    cordon(r.api, r.state, node)
    r.step()
    assert r.status("drained").get("restartCount", 0) == 0, "a cordon alone changes nothing"
    pod = next(name for (_, name), body in r.api.objects["pods"].items() if body["spec"].get("nodeName") == node)
    r.loop.ctx.evictions.note(("default", pod), r.clock.monotonic())  # kubectl drain asks (the webhook saw it)
    r.step()
    assert r.status("drained").get("restartCount", 0) == 1, \
        "the drain moves the rank (maintenance): the skip did not hide the eviction"
    assert node not in r.nodes_of("drained")


def _solves() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("railyard_placement_solve_seconds_count") or 0.0


def test_a_waiting_gang_is_solved_again_only_when_the_freed_capacity_could_hold_it():
    """In a stream capacity is freed every pass; a large gang's failing solve is the costliest step of
    a pass, so freed capacity that cannot hold it by count does not buy it a solve."""
    r = rig(nodes=4, starvation_seconds=1e9)  # never reserving: a holder's turn is always solved
    for name, replicas in (("hold", 2), ("one", 1)):
        r.submit(make_job(name, replicas))
        r.running()
    r.submit(make_job("big", 3))
    r.step()
    assert r.reason("big") == "Unschedulable"
    before = _solves()
    r.succeed("one")  # one node free again: two in all, the gang needs three
    r.step(2)
    assert _solves() == before, "capacity was freed, but not enough to hold the gang: no solve"
    r.succeed("hold")
    r.step(2)
    assert _solves() > before and r.status("big").get("placement"), "room for it: solved, and placed"


def test_a_pass_waits_for_a_burst_of_creations_to_pause_but_not_for_ever(monkeypatch):
    """The loop's debounce: while each step brings new jobs it waits on (one pass then sees them all),
    and it gives up after `most` seconds of a steady stream."""
    import asyncio

    from railyard.operator.act import loop as loop_module

    r = rig(nodes=4)
    arrivals = iter(range(3))
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # each step, the next job of the burst arrives (three in all)
        slept.append(seconds)
        if (index := next(arrivals, None)) is not None:
            r.submit(make_job(f"burst-{index}", 1))
            r.deliver()

    monkeypatch.setattr(loop_module.asyncio, "sleep", sleep)
    seen = len(r.state.jobs)
    r.submit(make_job("first", 1))
    r.deliver()
    asyncio.run(r.loop._while_jobs_arrive(seen, step=0.05, most=1.0))
    assert len(slept) == 4, "three steps that each brought a job, then one quiet step"
    assert len(r.state.jobs) == seen + 4
    slept.clear()
    arrivals = iter(range(3, 1000))  # a stream that never pauses
    asyncio.run(r.loop._while_jobs_arrive(len(r.state.jobs) - 1, step=0.25, most=1.0))
    assert slept == [0.25] * 4, "no longer than `most`"
    seen = len(r.state.jobs)
    slept.clear()
    asyncio.run(r.loop._while_jobs_arrive(seen))
    assert slept == [], "nothing new since the count was taken: no wait at all"


def test_while_gangs_are_released_a_pass_waits_a_second_unless_a_job_arrived_since_the_last_one(monkeypatch):
    """The loop's pace while the release line is busy: at most one pass a second on pod events, but a job
    that arrived since the last pass is placed without waiting out that second."""
    import asyncio

    from railyard.operator.act import loop as loop_module

    r = rig(nodes=4)
    r.submit(make_job("placed-before", 1))
    r.deliver()
    r.loop._jobs_at_pass = frozenset(r.state.jobs)
    slept: list[float] = []
    arrive_after: list[int] = [3]

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == arrive_after[0]:
            r.submit(make_job("arrives", 1))
            r.deliver()

    monkeypatch.setattr(loop_module.asyncio, "sleep", sleep)
    asyncio.run(r.loop._until_a_job_arrives(1.0, step=0.05))
    assert len(slept) == 3, "the job arrived on the third step: no more waiting"
    slept.clear()
    asyncio.run(r.loop._until_a_job_arrives(1.0, step=0.05))
    assert slept == [], "it has not been placed by a pass yet: no wait at all"
    r.loop._jobs_at_pass = frozenset(r.state.jobs) | {("default", "left-since")}  # one left: no reason
    arrive_after[0] = 10 ** 6
    asyncio.run(r.loop._until_a_job_arrives(1.0, step=0.25))
    assert slept == [0.25] * 4, "nothing arrived: the whole second"
