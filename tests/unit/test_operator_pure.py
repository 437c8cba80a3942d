"""Pure parts of the operator: builders, conditions, the per-job decision, the queue rule, state."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from railyard.operator.base.objects import parse_job, pod_view, state_of
from railyard.operator.base.reasons import ConditionStatus, ConditionType, JobState, PlacedReason
from railyard.operator.cache.state import ClusterState
from railyard.operator.decide import conditions as cond
from railyard.operator.decide.actions import Finish, Invalid, MarkRunning, Queue, Restart, Resume, Rollback
from railyard.operator.decide.assess import assess
from railyard.operator.decide.builders import PodOptions, build_pod, build_service, placement_status
from railyard.operator.decide.queue import QueuedJob, has_room, order, reserved_nodes
from railyard.topology.api.timestamps import epoch
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import profile_nodes, snapshot

JOB = {
    "apiVersion": "railyard.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "llm", "namespace": "ml", "uid": "u-1", "generation": 1,
                 "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"replicas": 2, "template": {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"containers": [{"name": "t", "env": [{"name": "RANK", "value": "99"}, {"name": "KEEP", "value": "1"}],
                                 "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}},
}


def test_pod_is_gated_pinned_owned_and_carries_launcher_env():
    pod = build_pod(parse_job(JOB), 1, "node-a", [0, 1, 2, 3, 4, 5, 6, 7], 2, True, "pid", PodOptions())
    spec = pod["spec"]
    # Pinned by node name (matchFields), not by the hostname label, which differs on some clouds.
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]
    assert "nodeSelector" not in spec
    assert spec["schedulingGates"] == [{"name": "railyard.dev/gang"}]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    labels = pod["metadata"]["labels"]
    assert labels["team"] == "a" and labels["railyard.dev/rank"] == "1"
    assert labels["scheduling.x-k8s.io/pod-group"] == "llm"
    assert pod["metadata"]["annotations"]["railyard.dev/gpus"] == "0,1,2,3,4,5,6,7"
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["RANK"] == "1" and env["KEEP"] == "1"  # placement env wins, the template's other env stays
    assert env["MASTER_ADDR"] == "llm-0.llm.ml.svc" and env["PET_NNODES"] == "2"
    assert env["NCCL_CROSS_NIC"] == "0" and env["RAILYARD_RESTART_COUNT"] == "0"
    assert spec["hostname"] == "llm-1" and spec["subdomain"] == "llm"
    assert "schedulingGates" not in JOB["spec"]["template"]["spec"], "template not mutated"


def test_no_cross_nic_hint_without_rail_alignment():
    env = build_pod(parse_job(JOB), 0, "n", [0], 2, False, "pid", PodOptions())["spec"]["containers"][0]["env"]
    assert "NCCL_CROSS_NIC" not in {e["name"] for e in env}


def test_service_is_headless():
    svc = build_service(parse_job(JOB))
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]


def test_condition_transition_time_moves_only_on_status_change():
    t1, t2, t3 = (datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in (1, 2, 3))
    placed, true, false = ConditionType.PLACED, ConditionStatus.TRUE, ConditionStatus.FALSE
    c1 = cond.set_condition([], placed, false, PlacedReason.UNSCHEDULABLE, "a", 1, now=t1)
    c2 = cond.set_condition(c1, placed, false, PlacedReason.UNSCHEDULABLE, "b", 1, now=t2)
    c3 = cond.set_condition(c2, placed, true, PlacedReason.RELEASED, "c", 1, now=t3)
    assert [c.last_transition_time for c in (c1[0], c2[0], c3[0])] == [t1, t1, t3]
    both = cond.set_condition(c3, ConditionType.RUNNING, true, PlacedReason.RELEASED, "", 1, now=t3)
    assert [c.type for c in both] == ["Running", "Placed"]  # most advanced first for the State column
    assert state_of(both) == JobState.RUNNING


def _placed_job(reason: str, nodes: list[str]) -> dict:
    snap = snapshot(leaves=1, tors=1, nodes=2)
    decision = solve(snap, GangRequest("llm", 2, 8, namespace="ml"))
    placement = placement_status(decision.placement, "llm", "pid").model_dump(mode="json", by_alias=True)
    placed = {"type": "Placed", "status": "True", "reason": reason, "message": "m",
              "lastTransitionTime": "2026-01-01T00:00:00Z"}
    return {**JOB, "status": {"placement": placement, "conditions": [placed]}}


def _pod(name: str, node: str | None, phase: str = "Pending", gated: bool = False, pid: str = "pid"):
    return pod_view({"metadata": {"name": name, "namespace": "ml", "annotations": {"railyard.dev/placement-id": pid}},
                     "spec": {"nodeName": node, "schedulingGates": [{"name": "railyard.dev/gang"}] if gated else []},
                     "status": {"phase": phase}})


def test_assess_walks_the_job_lifecycle():
    snap = snapshot(leaves=1, tors=1, nodes=2)
    nodes = [n.name for n in snap.nodes]
    now = time.time()
    assert isinstance(assess(parse_job(JOB), [], snap, now, 60), Queue)
    placing = parse_job(_placed_job("Placing", nodes))
    action = assess(placing, [_pod("llm-0", None, gated=True)], snap, now, 60)
    assert isinstance(action, Resume) and action.missing == ("llm-1",)
    released_body = _placed_job(PlacedReason.RELEASED, nodes)
    released = parse_job(released_body)
    running = [_pod("llm-0", nodes[0], "Running"), _pod("llm-1", nodes[1], "Running")]
    assert isinstance(assess(released, running, snap, now, 60), MarkRunning)
    done = [_pod("llm-0", nodes[0], "Succeeded"), _pod("llm-1", nodes[1], "Succeeded")]
    verdict = assess(released, done, snap, now, 60)
    assert isinstance(verdict, Finish) and verdict.succeeded
    failed = [_pod("llm-0", nodes[0], "Failed"), _pod("llm-1", nodes[1], "Running")]
    restart = assess(released, failed, snap, now, 60)
    assert isinstance(restart, Restart) and restart.reason == "ProcessFailed"  # counted against maxRestarts
    spent = parse_job({**released_body, "status": {**released_body["status"], "processRestarts": 3}})
    verdict = assess(spent, failed, snap, now, 60)
    assert isinstance(verdict, Finish) and not verdict.succeeded
    meta = {"name": "llm-0", "namespace": "ml", "annotations": {"railyard.dev/placement-id": "pid"}}
    exit2 = pod_view({"metadata": meta, "spec": {"nodeName": nodes[0]},
                      "status": {"phase": "Failed", "containerStatuses": [
                          {"name": "t", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}})
    final_spec = {**released_body["spec"], "faultPolicy": {"nonRetryableExitCodes": [2]}}
    final = parse_job({**released_body, "spec": final_spec})
    verdict = assess(final, [exit2, failed[1]], snap, now, 60)
    assert isinstance(verdict, Finish) and verdict.reason == "NonRetryableExit" and "exited 2" in verdict.message
    unbound = [_pod("llm-0", nodes[0], "Running"), _pod("llm-1", None)]
    assert isinstance(assess(released, unbound, snap, now, 60), Rollback)  # released long ago, never bound
    stale = [_pod("llm-0", nodes[0], "Running", pid="old"), *running[1:]]
    gone = assess(released, stale, snap, now, 60)  # rank 0 of this placement is gone: deleted by someone
    assert isinstance(gone, Restart) and gone.reason == "PodDeleted" and not gone.counted


def test_assess_rolls_back_a_placement_whose_node_vanished():
    placing = _placed_job("Placing", [])
    full = snapshot(leaves=1, tors=1, nodes=2)
    lost = placing["status"]["placement"]["ranks"][1]["node"]
    smaller = full.without_nodes(frozenset({lost}))
    action = assess(parse_job(placing), [_pod("llm-0", None, gated=True)], smaller, time.time(), 60)
    assert isinstance(action, Rollback) and action.reason == "NodeLost"
    assert action.pods == ("llm-0",)  # the pods already created are deleted


def test_a_template_that_sets_what_railyard_owns_is_invalid_naming_the_field():
    for field, value in (("schedulingGates", [{"name": "other"}]), ("restartPolicy", "OnFailure"),
                         ("schedulerName", "volcano")):
        body = {**JOB, "spec": {**JOB["spec"], "template": {"spec": {**JOB["spec"]["template"]["spec"],
                                                                     field: value}}}}
        action = assess(parse_job(body), [], snapshot(), time.time(), 60)
        assert isinstance(action, Invalid) and f"spec.template.spec.{field}" in action.message, action


def test_invalid_job_is_reported_not_raised():
    bad = {**JOB, "spec": {**JOB["spec"], "replicas": 0}}
    action = assess(parse_job(bad), [], snapshot(), time.time(), 60)
    assert isinstance(action, Invalid) and "spec.replicas" in action.message


def test_queue_orders_by_priority_then_age_and_reserves_for_the_starving():
    def q(name, priority, since, **kw):
        return QueuedJob(("ns", name), priority, since, GangRequest(name, 2, 8, **kw))

    jobs = [q("young", 0, 20.0), q("old", 0, 10.0), q("urgent", 5, 30.0)]
    assert [j.key[1] for j in order(jobs)] == ["urgent", "old", "young"]
    snap = snapshot()  # 2 leaves x 2 TORs x 4 nodes
    busy = [n.name for n in snap.nodes if n.tor == "tor-0-0-0"][:3]
    snap = snap.allocate((n, range(8)) for n in busy)
    reserved = reserved_nodes(q("big", 0, 0.0, required_tier="tor"), snap)
    assert len(reserved) == 2 and all(snap.node(n).tor != "tor-0-0-0" for n in reserved), \
        "two whole nodes of the freest TOR are held, not the TOR"
    assert len(snap.without_nodes(reserved).nodes) == len(snap.nodes) - 2
    anywhere = reserved_nodes(q("any", 0, 0.0), snap)
    assert len(anywhere) == 2 and len({snap.node(n).tor for n in anywhere}) == 1, "nor the cluster"


def test_state_counts_recorded_placements_before_pods_exist():
    state = ClusterState()
    for node in profile_nodes(leaves=1, tors=1, nodes=2):
        state.apply_node("ADDED", node)
    job = _placed_job("Placing", [])
    job["metadata"] = {**job["metadata"], "resourceVersion": "10"}
    state.apply_job("ADDED", job)
    assert state.snapshot().free_gpus == 0
    stale = {**job, "metadata": {**job["metadata"], "resourceVersion": "9"}, "status": {}}
    state.apply_job("MODIFIED", stale)
    assert state.snapshot().free_gpus == 0, "an older event must not erase the recorded placement"
    state.apply_job("DELETED", job)
    assert state.snapshot().free_gpus == 16


def test_a_big_gang_still_being_bound_is_not_taken_for_a_lost_bind():
    snap = snapshot(leaves=1, tors=1, nodes=2)
    nodes = [n.name for n in snap.nodes]
    released = parse_job(_placed_job(PlacedReason.RELEASED, nodes))  # released at 2026-01-01T00:00:00Z
    now = epoch("2026-01-01T00:02:00Z", 0)  # two minutes later, bind timeout 60 s

    def bound(at: str):
        return pod_view({"metadata": {"name": "llm-0", "namespace": "ml",
                                      "annotations": {"railyard.dev/placement-id": "pid"}},
                         "spec": {"nodeName": nodes[0]},
                         "status": {"phase": "Running", "conditions": [
                             {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]}})

    still_binding = [bound("2026-01-01T00:01:50Z"), _pod("llm-1", None)]
    assert not isinstance(assess(released, still_binding, snap, now, 60), Rollback), "a pod was bound 10 s ago"
    stalled = [bound("2026-01-01T00:00:05Z"), _pod("llm-1", None)]
    assert isinstance(assess(released, stalled, snap, now, 60), Rollback), "nothing bound for 115 s"


def test_room_for_a_gang_does_not_count_the_gpus_another_job_holds():
    snap = snapshot()  # 16 nodes of 8 GPUs
    names = [n.name for n in snap.nodes]
    snap = snap.allocate((n, range(8)) for n in names[2:])  # two empty nodes left
    request = GangRequest("small", 1, 8)
    assert has_room(snap, request)
    assert has_room(snap, request, frozenset(names[:1])), "one empty node is still off the reservation"
    assert not has_room(snap, request, frozenset(names[:2])), "the only free GPUs are held for another job"
    assert has_room(snap, GangRequest("small", 1, 4), frozenset(names[:1]) | {"gone-node"})
