"""Hot spares (RAILYARD_SPARES_PER_TOR) against the decision core: first placements leave a TOR's spare
free, backfilling jobs may use it, a lost rank is replaced by the spare in its own TOR, and a backfilled
spare is given back (checkpoint first) when a replacement needs it."""

from __future__ import annotations

from railyard.operator.base import metrics
from railyard.operator.decide.spares import spare_nodes, tors_short

from tests.support.clusters import snapshot
from tests.support.harness import Rig, rig
from tests.support.jobs import make_job
from tests.support.nodes import update_node

FAULT = {"type": "GpuNvlinkWatch", "status": "True", "message": "NVLink down",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}


def _fault(r: Rig, node: str) -> None:
    update_node(r.api, r.state, node, lambda n: n["status"]["conditions"].append(FAULT))


def _gauge() -> float:
    return next(s.value for m in metrics.TORS_WITHOUT_SPARE.collect() for s in m.samples)


def test_the_spares_are_the_highest_named_whole_free_nodes_of_each_tor():
    snap = snapshot(leaves=1, tors=2, nodes=3)
    names = sorted(n.name for n in snap.nodes)
    busy = snap.allocate([(names[-1], (0,))])  # one GPU used: that node is no spare
    spares = spare_nodes(busy, 1)
    assert len(spares) == 2 and names[-1] not in spares
    assert {busy.node(n).tor for n in spares} == {n.tor for n in snap.nodes}, "one per TOR"
    assert not spare_nodes(busy, 0)
    first_tor = [n.name for n in snap.nodes if n.tor == snap.nodes[0].tor]
    full = snap.allocate([(n, tuple(range(8))) for n in first_tor])
    assert tors_short(full, 1) == 1 and tors_short(full, 1, backfilled=first_tor[:1]) == 0


def test_first_placements_leave_the_spare_and_a_backfilling_job_may_use_it():
    r = rig(nodes=4, spares_per_tor=1, starvation_seconds=1e9)
    r.submit(make_job("main", 3))
    r.running()
    r.submit(make_job("late", 1))
    r.step()
    assert not r.status("late").get("placement"), "the TOR's last free node is its spare"
    assert _gauge() == 0
    r.submit(make_job("filler", 1, preemption={"backfillSpares": True}))
    r.step()
    assert r.status("filler").get("placement"), "a backfilling job may use the spare"
    assert _gauge() == 0, "a spare lent to a backfilling job is still a spare"


def test_a_lost_rank_takes_the_spare_in_its_own_tor():
    r = rig(nodes=4, tors=2, spares_per_tor=1)
    r.submit(make_job("main", 3, topology={"requiredTier": "tor"}))
    r.submit(make_job("other", 3, topology={"requiredTier": "tor"}))
    r.running()
    lost = r.nodes_of("main")[1]
    _fault(r, lost)
    r.step()
    status = r.status("main")
    assert status["restartCount"] == 1
    assert [x["sameTor"] for x in status["lastRestart"]["replacements"]] == [True]


def test_a_backfilled_spare_is_given_back_checkpoint_first_when_a_replacement_needs_it():
    r = rig(nodes=4, spares_per_tor=1)
    r.submit(make_job("main", 3, topology={"requiredTier": "tor"}))
    r.running()
    r.submit(make_job("filler", 1, preemption={"backfillSpares": True}))
    r.running()
    spare = r.nodes_of("filler")[0]
    lost = r.nodes_of("main")[0]
    _fault(r, lost)
    r.step()
    assert r.status("filler").get("preemptedBy") == "default/main"
    assert not r.status("main").get("restartCount"), "the restart waits for the spare"
    r.step()  # nobody reports for the filler: it is requeued at once, its pod terminates
    assert r.status("filler").get("placement") is None
    r.pods_gone()
    r.step()
    status = r.status("main")
    assert status["restartCount"] == 1
    assert status["lastRestart"]["replacements"][0]["new"] == spare
    assert status["lastRestart"]["replacements"][0]["sameTor"] is True
    assert r.status("filler").get("placement") is None, "the filler waits for a spare again"


def _scale(r: Rig, name: str, replicas: int) -> None:
    """`kubectl scale tj NAME --replicas=N`."""
    r.edit_spec(name, replicas=replicas)


def test_an_elastic_gang_does_not_grow_onto_the_spare():
    """Growth is a placement like any other: the TOR's last free node is its spare, kept for replacements."""
    r = rig(nodes=4, spares_per_tor=1, starvation_seconds=1e9)
    r.submit(make_job("main", 2))
    r.submit(make_job("elastic", 1, minReplicas=1, maxReplicas=4))
    r.running()
    _scale(r, "elastic", 2)
    r.step()
    status = r.status("elastic")
    assert not status.get("restartCount") and len(status["placement"]["ranks"]) == 1, "the spare is not taken"
    assert (r.condition("elastic", "BelowDesired") or {}).get("status") == "True"


def test_an_elastic_gang_that_backfills_may_grow_onto_the_spare():
    r = rig(nodes=4, spares_per_tor=1, starvation_seconds=1e9)
    r.submit(make_job("main", 2))
    r.submit(make_job("elastic", 1, minReplicas=1, maxReplicas=4, preemption={"backfillSpares": True}))
    r.running()
    _scale(r, "elastic", 2)
    r.step()
    assert r.status("elastic")["restartCount"] == 1 and len(r.status("elastic")["placement"]["ranks"]) == 2


def test_lent_spares_are_reclaimed_even_from_a_backfiller_at_its_hourly_preemption_cap():
    """A backfiller takes the spares on the promise to give them back: the hourly cap, which shields gangs
    from evictions for others' first placements, does not shield it from that."""
    r = rig(nodes=4, spares_per_tor=1, preemptions_per_hour=0)
    r.submit(make_job("main", 3, topology={"requiredTier": "tor"}))
    r.running()
    r.submit(make_job("filler", 1, preemption={"backfillSpares": True}))
    r.running()
    _fault(r, r.nodes_of("main")[0])
    r.step()
    assert r.status("filler").get("preemptedBy") == "default/main"


def test_an_elastic_gang_with_a_rank_on_a_cordoned_node_resizes_only_once_it_is_usable():
    """A resize restarts the gang with a pod pinned to each kept rank's node: not onto a cordoned one (it
    would never bind). It waits, and resizes when the node is uncordoned."""
    from tests.support.nodes import cordon

    r = rig(nodes=4)
    r.submit(make_job("e", 1, minReplicas=1, maxReplicas=4))
    r.running()
    (node,) = r.nodes_of("e")
    cordon(r.api, r.state, node)
    _scale(r, "e", 2)
    r.step(2)
    assert not r.status("e").get("restartCount") and not [
        e for e in r.api.posted_events if e["reason"] == "InternalError"], "no crash, no restart onto it"
    cordon(r.api, r.state, node, on=False)
    r.step()
    assert r.status("e")["restartCount"] == 1 and len(r.nodes_of("e")) == 2
