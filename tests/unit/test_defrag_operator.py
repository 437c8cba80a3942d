"""Defragmentation against the decision core (in-memory API): with RAILYARD_DEFRAGMENTATION on, a TOR
gang that fits by free GPUs but not by topology has a migratable one-node gang moved to the other
TOR (checkpoint first, nothing quarantined), then lands in the TOR that was cleared; jobs that do not
allow it are never moved; a job is moved at most once per interval."""

from __future__ import annotations

from typing import Any

from railyard.operator.base.settings import DefragmentationSettings
from railyard.operator.cache.memory import holds
from railyard.operator.decide.room import movers

from tests.support.harness import Rig, rig
from tests.support.jobs import make_job


def _fragmented(migratable: bool = True, **placement: Any) -> tuple[Rig, dict[str, str]]:
    """Two TORs of two nodes; one one-node gang left in each TOR (the others finished)."""
    r = rig(nodes=2, tors=2, defragmentation=True, starvation_seconds=1e9, **placement)
    for name in ("a", "b", "c", "d"):
        r.submit(make_job(name, 1, preemption={"migratable": migratable}, checkpoint={"path": "/c"}))
    r.running()
    tor = {name: r.state.nodes[r.nodes_of(name)[0]].tor for name in "abcd"}
    gone = {}
    for name in "abcd":  # finish one gang per TOR
        if tor[name] not in gone:
            gone[tor[name]] = name
    for name in gone.values():
        r.api.delete_job("default", name)
    r.pods_gone()
    r.step()
    return r, {n: t for n, t in tor.items() if n not in gone.values()}


def _moved(r: Rig, name: str) -> bool:
    return (r.status(name).get("lastRestart") or {}).get("reason") == "Migration"


def test_a_gang_is_moved_to_the_other_tor_and_the_waiting_gang_lands_in_the_cleared_one():
    r, left = _fragmented()
    r.submit(make_job("wide", 2, topology={"requiredTier": "tor"}))
    r.step()
    assert r.reason("wide") == "Defragmenting", r.condition("wide", "Placed")
    r.step()  # the mover restarts elsewhere (nobody reports: no step to wait for)
    moved = [n for n in left if _moved(r, n)]
    assert len(moved) == 1
    mover = moved[0]
    status = r.status(mover)
    assert status["lastRestart"]["replacements"][0]["sameTor"] is False
    assert not status.get("unhealthyNodes") or all(u["reason"] == "Migration" for u in status["unhealthyNodes"])
    assert not [t for n in r.api.objects["nodes"] for t in r.taints(n[1]) if t["key"] == "railyard.dev/unhealthy"]
    events = [e for e in r.api.posted_events if e["reason"] == "Migrating"]
    assert events and "default/wide" in events[0]["message"]
    r.pods_gone()
    r.running()
    wide = {r.state.nodes[n].tor for n in r.nodes_of("wide")}
    assert wide == {left[mover]}, "it landed in the TOR its mover left"
    stayed = [n for n in left if n != mover]
    assert not _moved(r, stayed[0]) and r.state.nodes[r.nodes_of(mover)[0]].tor == left[stayed[0]]


def test_jobs_that_do_not_allow_it_are_never_moved():
    r, left = _fragmented(migratable=False)
    r.submit(make_job("wide", 2, topology={"requiredTier": "tor"}))
    r.step(2)
    assert r.reason("wide") == "Unschedulable"
    assert not any(_moved(r, n) for n in left)


def test_off_when_the_operator_does_not_defragment():
    r, left = _fragmented()
    r.loop.ctx.settings = r.loop.ctx.settings.model_copy(
        update={"defragmentation": DefragmentationSettings(enabled=False)})
    r.submit(make_job("wide", 2, topology={"requiredTier": "tor"}))
    r.step(2)
    assert r.reason("wide") == "Unschedulable" and not any(_moved(r, n) for n in left)


def test_a_job_is_moved_at_most_once_per_interval():
    r, left = _fragmented(migration_interval_seconds=3600)
    r.submit(make_job("wide", 2, topology={"requiredTier": "tor"}))
    r.step(2)
    mover = next(n for n in left if _moved(r, n))
    r.pods_gone()
    r.step()

    def movable() -> set[str]:
        view = r.loop.queue.given([], r.state.snapshot(), r.clock.time()).room
        return {m.gang.key for m in movers(view, 0, ("default", "nobody"))}

    assert f"default/{mover}" not in movable(), "moved a moment ago: not a mover again"
    assert movable(), "the others still are"
    r.clock.advance(3601)
    assert f"default/{mover}" in movable(), "once the interval has passed it may move again"


def test_a_move_no_longer_wanted_is_called_off_and_the_mover_stops_holding_for_its_checkpoint():
    from railyard.operator.decide.reports import WorkerReport

    r, left = _fragmented()
    for name in left:  # the movers' ranks report: a move waits for the step they are asked to save
        r.loop.book.record(WorkerReport.model_validate({
            "namespace": "default", "job": name, "rank": 0, "restartCount": r.status(name).get("restartCount", 0),
            "step": 10, "checkpoints": []}), r.clock.time())
    r.submit(make_job("wide", 2, topology={"requiredTier": "tor"}))
    r.step(2)
    asked = [n for n in left if r.loop.book.directives(("default", n)).get("checkpoint")]
    assert len(asked) == 1 and not any(_moved(r, n) for n in left), "asked to save a step, not moved yet"
    r.api.delete_job("default", "wide")  # the gang it made room for is gone
    r.deliver()
    r.step()
    assert not r.loop.book.directives(("default", asked[0])).get("checkpoint"), "its ranks train on"
    assert any(e["reason"] == "MigrationCancelled" for e in r.api.posted_events)
    r.step(2)
    assert not any(_moved(r, n) for n in left)
    assert ("default", "wide") not in holds(r.loop.ctx.memories, r.state.jobs)
