"""Planned maintenance against the decision core (in-memory API): a drain the eviction webhook holds (on a
cordoned node, or one an autoscaler tainted for removal), or a node announced for maintenance, makes the
gang save a step and move its ranks there, with nothing quarantined and no step lost; a cordon alone, or an
eviction asked for on a node nobody drains, changes nothing. What the webhook answers: decide/eviction_review."""

from __future__ import annotations

import pytest
from railyard.operator.decide import eviction_review
from railyard.operator.decide.reports import WorkerReport

from tests.support.harness import Rig, rig
from tests.support.jobs import make_job
from tests.support.nodes import cordon, taint, update_node


def _report(r: Rig, job: str, rank: int, step: int, saved: tuple[int, ...] = ()) -> None:
    r.loop.book.record(WorkerReport.model_validate({
        "namespace": "default", "job": job, "rank": rank, "restartCount": r.status(job).get("restartCount", 0),
        "step": step, "checkpoints": [{"step": s, "path": f"/c/{s}"} for s in saved]}), r.clock.time())


def _asked(r: Rig, job: str) -> int | None:
    return (r.loop.book.directives(("default", job)).get("checkpoint") or {}).get("step")


def _running(name: str, replicas: int = 2, **placement) -> tuple[Rig, list[str]]:
    r = rig(nodes=4, **placement)
    r.submit(make_job(name, replicas, checkpoint={"path": "/c"}))
    r.running()
    return r, r.nodes_of(name)


def test_no_disruption_budget_is_created_so_drains_never_stall_on_an_operator_that_is_gone():
    r, _ = _running("kept")
    r.step(3)
    assert not r.api.objects.get("poddisruptionbudgets"), "the webhook holds drains, failing open"


@pytest.mark.parametrize("drain", ["kubectl", "karpenter", "cluster-autoscaler"])
def test_a_drain_held_by_the_webhook_saves_a_step_then_moves_the_ranks_and_resumes_after_it(drain):
    r, nodes = _running("drained")
    for rank in (0, 1):
        _report(r, "drained", rank, 40)
    # kubectl drain cordons, autoscalers taint the node for removal; then each asks to evict (the webhook holds)
    if drain == "kubectl":
        cordon(r.api, r.state, nodes[0])
    else:
        key = "karpenter.sh/disrupted" if drain == "karpenter" else "ToBeDeletedByClusterAutoscaler"
        taint(r.api, r.state, nodes[0], key, "NoSchedule", "1733000000" if drain != "karpenter" else "")
    r.loop.ctx.evictions.note(("default", "drained-0"), r.clock.monotonic())
    r.step()
    target = _asked(r, "drained")
    assert target is not None and target > 40, "every rank is asked to save a step ahead of where they are"
    assert not r.status("drained").get("restartCount"), "nothing moves before the step is saved"
    _report(r, "drained", 0, target, saved=(target,))
    r.step()
    assert not r.status("drained").get("restartCount"), "one rank saved it: not yet"
    _report(r, "drained", 1, target, saved=(target,))
    r.step()
    status = r.status("drained")
    assert status["restartCount"] == 1 and status["lastRestart"]["reason"] == "Maintenance"
    assert status["lastRestart"]["lostNodes"] == [nodes[0]] and status["lastRestart"]["resumeStep"] == target
    moved = r.nodes_of("drained")
    assert nodes[0] not in moved and moved[1] == nodes[1], "the drained rank moved, the other kept its node"
    assert not [t for t in r.taints(nodes[0]) if t["key"] == "railyard.dev/unhealthy"], "maintenance is no fault"
    assert not status.get("unhealthyNodes") or all(u["reason"] == "Maintenance" for u in status["unhealthyNodes"])


def test_a_checkpoint_that_never_comes_moves_the_gang_after_the_timeout_from_its_last_commit():
    r, nodes = _running("silent", maintenance_checkpoint_seconds=30)
    for rank in (0, 1):
        _report(r, "silent", rank, 100, saved=(50,))
    cordon(r.api, r.state, nodes[1])
    r.loop.ctx.evictions.note(("default", "silent-1"), r.clock.monotonic())
    r.step()
    assert _asked(r, "silent") is not None and not r.status("silent").get("restartCount")
    r.clock.advance(31)
    r.step()
    status = r.status("silent")
    assert status["restartCount"] == 1 and status["lastRestart"]["reason"] == "Maintenance"
    assert status["lastRestart"]["resumeStep"] == 50, "from the newest step every rank saved"


def test_an_eviction_asked_for_on_a_node_nobody_drains_or_a_cordon_alone_changes_nothing():
    r, nodes = _running("calm")
    r.loop.ctx.evictions.note(("default", "calm-0"), r.clock.monotonic())  # not a drain: node schedulable
    cordon(r.api, r.state, nodes[1])  # cordoned, but nobody asked to evict there
    r.step(3)
    assert not r.status("calm").get("restartCount")
    assert _asked(r, "calm") is None


def test_a_node_announced_for_maintenance_moves_its_ranks_and_takes_no_new_ones():
    r, nodes = _running("announced")

    def announce(node: dict) -> None:
        node["metadata"].setdefault("annotations", {})["railyard.dev/maintenance"] = "firmware 2026-12-02"

    update_node(r.api, r.state, nodes[0], announce)
    assert "under planned maintenance" in r.state.excluded[nodes[0]].reason
    r.step()  # nobody reports for this gang: nothing to wait for
    status = r.status("announced")
    assert status["restartCount"] == 1 and status["lastRestart"]["reason"] == "Maintenance"
    assert "firmware 2026-12-02" in status["unhealthyNodes"][0]["message"]
    assert nodes[0] not in r.nodes_of("announced")
    r.submit(make_job("newcomer", 1))  # one node is free besides the announced one
    r.step()
    assert r.nodes_of("newcomer") != [nodes[0]]


# --- what the webhook answers (decide/eviction_review) ---------------------------------------------------

def _verdict(r: Rig, job: str, pod: str, asked_for: float = 0.0, reports: bool = True) -> eviction_review.Verdict:
    view = r.state.pods[("default", pod)]
    return eviction_review.judge(view, r.state.jobs[("default", job)], r.state.health.get(view.node_name or ""),
                                 reports, asked_for, 300)


def test_the_webhook_holds_a_draining_ranks_eviction_with_429_for_a_bounded_time():
    r, nodes = _running("held")
    pod = next(p for p in r.pods() if r.api.objects["pods"][("default", p)]["spec"].get("nodeName") == nodes[0])
    assert _verdict(r, "held", pod).held, "a node not seen draining: held a moment (the cordon may be on its way)"
    assert not _verdict(r, "held", pod, asked_for=11).held, "then allowed: not a drain (the gang restarts)"
    cordon(r.api, r.state, nodes[0])
    verdict = _verdict(r, "held", pod)
    assert verdict.held and "saves a checkpoint" in (verdict.message or "")
    answer = eviction_review.answer("u1", verdict)["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 429, "drains and autoscalers retry a 429"
    assert not _verdict(r, "held", pod, asked_for=301).held, "at most RAILYARD_MAINTENANCE_CHECKPOINT_SECONDS"
    assert not _verdict(r, "held", pod, reports=False).held, "ranks that report nothing cannot save first"
    allowed = eviction_review.answer("u2", _verdict(r, "held", pod, asked_for=301))["response"]
    assert allowed["allowed"] is True and "evicted now" in allowed["warnings"][0]
