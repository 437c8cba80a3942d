"""A declared run time (spec.timeLimitSeconds; the annotation on adopted workloads): counted from the gang's last
placement from the queue, kept across restarts, enforced at the limit (Failed=True TimeLimitExceeded, an Event,
the pods deleted; an adopted gang's pods get the rest as their activeDeadlineSeconds)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from railyard.operator.act.loop import PlacementLoop
from railyard.operator.act.materialiser import _deadline_left
from railyard.operator.base.objects import parse_job
from railyard.operator.base.reasons import FinishReason, LossReason
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.actions import Finish
from railyard.operator.decide.adoption import adopted_job, pin_patch, time_limit
from railyard.operator.decide.assess import assess
from railyard.topology.cluster.workload_groups import GroupMember, WorkloadKind
from railyard.topology.cluster.workload_intent import TIME_LIMIT
from railyard.topology.solver.placement import solve

from tests.support.clusters import snapshot
from tests.support.harness import rig
from tests.support.jobs import make_job
from tests.support.nodes import not_ready


def _failed(r, name: str) -> dict | None:
    return r.condition(name, "Failed")


def test_a_gang_runs_until_its_limit_and_is_ended_there_with_a_condition_and_an_event():
    r = rig(nodes=4)
    r.submit(make_job("bounded", 2, timeLimitSeconds=600))
    r.running()
    placed_at = r.status("bounded")["placedAt"]
    r.clock.advance(590)
    r.step()
    assert _failed(r, "bounded") is None, "ten seconds are left"
    assert r.pods() == {"bounded-0", "bounded-1"}
    r.clock.advance(15)
    r.step(2)
    failed = _failed(r, "bounded")
    assert failed is not None and failed["status"] == "True" and failed["reason"] == "TimeLimitExceeded"
    assert "spec.timeLimitSeconds=600" in failed["message"] and placed_at.replace("+00:00", "Z")[:16] in \
        failed["message"].replace("+00:00", "Z")
    assert any(e.get("reason") == "TimeLimitExceeded" and e.get("type") == "Warning" for e in r.api.posted_events)
    assert all(p["metadata"].get("deletionTimestamp") for p in r.api.objects["pods"].values()), "its pods go"


def test_a_gang_without_a_limit_runs_on():
    r = rig(nodes=2)
    r.submit(make_job("open", 1))
    r.running()
    r.clock.advance(30 * 24 * 3600)
    r.step()
    assert _failed(r, "open") is None and "placedAt" in r.status("open")


def test_a_restart_after_a_fault_keeps_the_clock_running():
    r = rig(nodes=4)
    r.submit(make_job("faulty", 2, timeLimitSeconds=900, faultPolicy={"nodeLossGraceSeconds": 0}))
    r.running()
    placed_at = r.status("faulty")["placedAt"]
    r.clock.advance(300)
    not_ready(r.api, r.state, r.nodes_of("faulty")[0])
    r.step(2)
    r.pods_gone()
    r.step()
    assert r.status("faulty").get("restartCount") == 1, "the node loss restarted the gang"
    assert r.status("faulty")["placedAt"] == placed_at, "a restart is not a new placement from the queue"
    r.api.bind_released()
    r.deliver()
    r.clock.advance(601)
    r.step(2)
    assert (_failed(r, "faulty") or {}).get("reason") == "TimeLimitExceeded", "900 s from the first placement"


def test_past_the_deadline_an_adopted_gang_is_failed_and_its_pods_are_left_to_the_kubelet():
    body = make_job("adopted", 2, timeLimitSeconds=60)
    body["spec"]["adopt"] = {"kind": "JobSet", "name": "js", "group": "js/0"}
    body["status"] = {"placedAt": "2027-01-15T08:00:00Z",
                      "placement": {"id": "p1", "ranks": [{"rank": 0, "node": "n0", "gpus": [0]}],
                                    "tors": 1, "leaves": 1, "spines": 1}}
    job = parse_job(body)
    deadline = job.deadline
    assert deadline is not None
    before = assess(job, [], snapshot(), deadline.timestamp() - 1, 300)
    after = assess(job, [], snapshot(), deadline.timestamp(), 300)
    assert not isinstance(before, Finish)
    assert isinstance(after, Finish) and after.reason == FinishReason.TIME_LIMIT_EXCEEDED and not after.succeeded


def _member() -> GroupMember:
    return GroupMember("js/0", "js", WorkloadKind.JOBSET, 0, 2, None)


def test_an_adopted_gang_declares_its_limit_by_annotation_or_by_its_pods_own_active_deadline():
    assert time_limit({TIME_LIMIT: "3600"}, {}) == 3600
    assert time_limit({}, {"activeDeadlineSeconds": 1200}) == 1200
    assert time_limit({TIME_LIMIT: "3600"}, {"activeDeadlineSeconds": 1200}) == 1200, "the smaller binds"
    assert time_limit({}, {}) is None
    pod = {"metadata": {"annotations": {TIME_LIMIT: "7200"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert adopted_job(_member(), 2, pod, "ns", {})["spec"]["timeLimitSeconds"] == 7200


@pytest.mark.parametrize("bad", ["0", "-5", "1h", "", "99999999999"])
def test_a_bad_time_limit_annotation_is_refused_naming_it(bad: str):
    with pytest.raises(ValueError, match=f"{TIME_LIMIT}={bad!r}"):
        time_limit({TIME_LIMIT: bad}, {})


def test_an_adopted_pod_is_pinned_with_what_is_left_of_its_gangs_limit_unless_its_own_ends_it_sooner():
    body = make_job("adopted", 1, timeLimitSeconds=600)
    body["status"] = {"placedAt": "2027-01-15T08:00:00Z",
                      "placement": {"id": "p1", "ranks": [{"rank": 0, "node": "n0", "gpus": [0]}],
                                    "tors": 1, "leaves": 1, "spines": 1}}
    job = parse_job(body)
    assert job.deadline is not None
    start = job.deadline.timestamp() - 600
    assert _deadline_left(job, None, start + 10.5) == 590
    assert _deadline_left(job, 100, start + 10) is None, "its own activeDeadlineSeconds ends it sooner"
    assert _deadline_left(job, 900, start + 10) == 590, "lowered, as the API allows"
    patch = pin_patch({}, "adopted", 0, 0, "n0", [0], "p1", 590)
    assert patch["spec"]["activeDeadlineSeconds"] == 590
    assert "activeDeadlineSeconds" not in pin_patch({}, "adopted", 0, 0, "n0", [0], "p1")["spec"]


def test_a_new_leader_ends_the_gang_at_the_same_deadline():
    r = rig(nodes=2)
    r.submit(make_job("inherited", 1, timeLimitSeconds=300))
    r.running()
    r.clock.advance(301)
    successor = PlacementLoop(r.state, r.api, r.loop.ctx.settings, lambda: True, clock=r.clock)  # blank memory
    asyncio.run(successor.run_once())
    r.deliver()
    assert (_failed(r, "inherited") or {}).get("reason") == "TimeLimitExceeded", "the deadline is in the status"


def test_a_preemption_victim_past_its_deadline_is_ended_not_requeued():
    body = make_job("victim", 1, timeLimitSeconds=60)
    body["status"] = {"placedAt": "2027-01-15T08:00:00Z",
                      "placement": {"id": "p1", "ranks": [{"rank": 0, "node": "n0", "gpus": [0], "pod": "victim-0"}],
                                    "tors": 1, "leaves": 1, "spines": 1},
                      "preemptedBy": "default/big",
                      "conditions": [{"type": "Placed", "status": "True", "reason": "Released"},
                                     {"type": "Preempted", "status": "True", "reason": "SavingCheckpoint"}]}
    job = parse_job(body)
    assert job.deadline is not None
    action = assess(job, [], snapshot(), job.deadline.timestamp() + 1, 300)
    assert isinstance(action, Finish) and action.reason == FinishReason.TIME_LIMIT_EXCEEDED


def test_a_requeued_gang_starts_its_clock_again_when_it_is_placed_again():
    r = rig(nodes=2)
    r.submit(make_job("again", 1, timeLimitSeconds=600))
    r.running()
    first = parse_job(r.api.objects["trainingjobs"][("default", "again")])
    assert first.status.placed_at is not None
    later = first.status.placed_at + timedelta(seconds=500)
    requeued = transitions.requeued(first, LossReason.NODE_DELETED, [], [], "lost", None, later)
    body = dict(r.api.objects["trainingjobs"][("default", "again")])
    body["status"] = {**body["status"], **requeued.as_patch()}
    body["status"] = {k: v for k, v in body["status"].items() if v is not None}
    job = parse_job(body)
    assert job.placement is None and job.deadline is None, "no placement: no clock"
    assert job.request is not None
    decision = solve(r.state.snapshot(), job.request)
    assert decision.placement is not None
    placed = transitions.placing(job, decision.placement, "p2", later + timedelta(seconds=5), 0)
    assert placed.placed_at == later + timedelta(seconds=5)


def test_a_gang_ended_at_its_limit_holds_its_gpus_until_its_pods_have_gone():
    """Found by the interaction model: a finished job's pods were believed by nobody, so in the pass that ended a
    gang at its limit, a waiting job was placed on the GPUs its pods (released, not yet bound) still held."""
    r = rig(nodes=1)
    r.submit(make_job("ending", 1, timeLimitSeconds=60))
    r.step()  # placed and released; not bound yet
    r.submit(make_job("next", 1))
    r.step()
    assert "placement" not in r.status("next")
    r.clock.advance(61)
    r.step()  # ends the gang; its pod still exists
    assert (_failed(r, "ending") or {}).get("reason") == "TimeLimitExceeded"
    assert "placement" not in r.status("next"), "placed on GPUs the ended gang's pod still holds"
    r.step(2)  # its pod deleted (unbound: at once), then the GPUs are free
    assert r.status("next").get("placement"), "placed once it has gone"
