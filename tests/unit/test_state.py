"""The state + placer guarantees (operator v2): expectations, resync, tombstones, readiness, full
resource accounting, graceful deletes, no write storms, incremental cost. Pure: the API is the
in-memory FakeApi, never a stand-in for the e2e suite."""

from __future__ import annotations

import asyncio
import copy
import time

import pytest
from railyard.operator.act.loop import PlacementLoop
from railyard.operator.base.objects import parse_job, pod_view
from railyard.operator.cache.state import KINDS, ClusterState
from railyard.operator.decide.actions import Cleanup
from railyard.operator.decide.assess import assess
from railyard.topology.api.timestamps import epoch, iso
from railyard.topology.cluster.labels import parse_levels
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest

from tests.support import status as cond
from tests.support.clock import ManualClock
from tests.support.clusters import profile_nodes
from tests.support.fakeapi import FakeApi
from tests.support.jobs import make_job
from tests.support.nodes import not_ready
from tests.support.settings import settings as operator_settings


def synced(api: FakeApi, state: ClusterState | None = None) -> ClusterState:
    state = state if state is not None else ClusterState()
    for kind in KINDS:
        items, rv = api.listing(kind)
        state.replace(kind, items, rv)
    api.log.clear()
    return state


def placer_for(state: ClusterState, api: FakeApi, debounce: float = 0.0,
               clock: ManualClock | None = None) -> PlacementLoop:
    settings = operator_settings(loss_debounce_seconds=debounce, not_ready_debounce_seconds=debounce * 5)
    return PlacementLoop(state, api, settings, lambda: True, clock=clock)


def run(coro):
    return asyncio.run(coro)


def operator_over(nodes: int) -> tuple[FakeApi, ClusterState, PlacementLoop]:
    """A fake cluster of `nodes` nodes in one TOR, and an operator that has listed it."""
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=nodes))
    state = synced(api)
    return api, state, placer_for(state, api)


def submit(api: FakeApi, state: ClusterState, body: dict) -> None:
    """Create a job and let the operator see its ADDED event (and nothing else)."""
    api.create_job(body)
    state.apply("trainingjobs", "ADDED", api.log[-1][2])


def job_status(api: FakeApi, name: str, ns: str = "default") -> dict:
    return api.objects["trainingjobs"][(ns, name)].get("status") or {}


def placed_reason(api: FakeApi, name: str) -> str | None:
    return (cond.get(job_status(api, name).get("conditions"), cond.PLACED) or {}).get("reason")


# --- 1. expectations -------------------------------------------------------------------------------

def test_a_released_gang_is_not_taken_for_deleted_while_the_pod_watch_lags():
    api, state, placer = operator_over(4)
    api.create_job(make_job("small", 4, gpus=2))
    for kind, event, obj in api.log:  # the job's ADDED event arrives; pod events will not
        if kind == "trainingjobs":
            state.apply(kind, event, obj)
    run(placer.run_once())
    assert placed_reason(api, "small") == "Released"
    api.bind_released()
    for _ in range(3):  # more iterations while the pod watch delivers nothing at all
        run(placer.run_once())
    assert placed_reason(api, "small") == "Released"
    assert not cond.is_true(job_status(api, "small").get("conditions"), cond.FAILED)
    assert len(api.objects["pods"]) == 4
    released = [e for e in api.posted_events if e["reason"] == "Released"]
    assert len(released) == 1 and released[0]["count"] == 1


def test_a_pod_is_gone_only_after_it_was_observed_deleted():
    api, state, placer = operator_over(2)
    submit(api, state, make_job("pair", 2))
    run(placer.run_once())
    api.log.clear()
    api._remove("pods", ("default", "pair-1"))  # someone deletes a rank
    run(placer.run_once())
    assert not cond.is_true(job_status(api, "pair").get("conditions"), cond.FAILED), "not observed yet"
    for kind, event, obj in api.log:
        state.apply(kind, event, obj)
    run(placer.run_once())
    status = job_status(api, "pair")
    # Deleted by someone else: an infrastructure restart on the same nodes, not a failure of the job.
    assert not cond.is_true(status.get("conditions"), cond.FAILED)
    assert status["restartCount"] == 1 and status["lastRestart"]["reason"] == "PodDeleted"
    assert not status.get("processRestarts"), "an infrastructure restart does not count against maxRestarts"
    assert {p for (_, p) in api.objects["pods"]} == {"pair.p1-0", "pair.p1-1"}


# --- 2. resync and readiness -----------------------------------------------------------------------

def test_objects_deleted_while_the_watch_was_down_are_forgotten_after_a_relist():
    nodes = profile_nodes(leaves=1, tors=1, nodes=3)
    api = FakeApi(nodes)
    foreign = {"metadata": {"name": "squatter", "namespace": "x"},
               "spec": {"nodeName": nodes[0]["metadata"]["name"],
                        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
               "status": {"phase": "Running"}}
    api._store("pods", foreign, "ADDED")
    api.create_job(make_job("doomed", 1))
    state = synced(api)
    assert state.snapshot().free_gpus == 16 and ("default", "doomed") in state.jobs
    # The watch is down: deletions happen, their events are lost.
    api._remove("nodes", ("", nodes[2]["metadata"]["name"]))
    api._remove("pods", ("x", "squatter"))
    api._remove("trainingjobs", ("default", "doomed"))
    api.log.clear()
    for kind in KINDS:
        items, rv = api.listing(kind)
        state.replace(kind, items, rv)
    assert sorted(state.nodes) == sorted(n["metadata"]["name"] for n in nodes[:2])
    assert not state.pods and not state.jobs
    assert state.snapshot().free_gpus == 16


def test_a_replayed_event_from_before_the_list_does_not_resurrect_a_deleted_job():
    # Found by the state-machine test: an operator that restarted (a fresh list without the job) got a
    # stale event of the deleted job, took it as live and re-created its pods on GPUs given away since.
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=1))
    api.create_job(make_job("gone", 1))
    stale = api.log[-1][2]
    api._remove("trainingjobs", ("default", "gone"))
    state = synced(api)
    state.apply("trainingjobs", "MODIFIED", stale)
    assert not state.jobs
    api.create_job(make_job("fresh", 1))  # an event after the list still lands
    state.apply("trainingjobs", "ADDED", api.log[-1][2])
    assert ("default", "fresh") in state.jobs


def test_relist_keeps_what_a_write_answered_after_the_list_was_cut():
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=1))
    state = synced(api)
    items, list_rv = api.listing("pods")  # cut before the pod exists
    created = api._store("pods", {"metadata": {"name": "p", "namespace": "d"}, "spec": {}, "status": {}}, "ADDED")
    state.apply_pod("ADDED", created)  # the create response
    state.replace("pods", items, list_rv)
    assert ("d", "p") in state.pods


def test_the_placer_does_nothing_before_every_kind_is_listed():
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=2))
    api.create_job(make_job("early", 1))
    state = ClusterState()
    jobs, rv = api.listing("trainingjobs")
    state.replace("trainingjobs", jobs, rv)
    nodes, rv = api.listing("nodes")
    state.replace("nodes", nodes, rv)
    placer = placer_for(state, api)
    run(placer.run_once())
    assert api.writes == [], "placed before the pods were listed: their GPUs would look free"
    pods, rv = api.listing("pods")
    state.replace("pods", pods, rv)
    run(placer.run_once())
    assert api.writes == [], "placed before the PriorityClasses were listed: the queue order would be a guess"
    classes, rv = api.listing("priorityclasses")
    state.replace("priorityclasses", classes, rv)
    run(placer.run_once())
    assert placed_reason(api, "early") == "Released"


# --- 8. tombstones and ordering --------------------------------------------------------------------

def test_a_late_write_response_does_not_resurrect_a_deleted_job():
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=1))
    state = synced(api)
    job = api.create_job(make_job("ghost", 1))
    state.apply_job("ADDED", job)
    late = copy.deepcopy(job)
    late["status"] = {"placement": {"id": "x", "ranks": [{"rank": 0, "node": "n", "gpus": [0], "pod": "ghost-0"}]}}
    api.delete_job("default", "ghost")
    state.apply_job("DELETED", api.log[-1][2])
    state.apply_job("MODIFIED", late)  # e.g. a patch answered after the job was deleted
    assert ("default", "ghost") not in state.jobs
    recreated = api.create_job(make_job("ghost", 1))  # a new object (new uid) may take the name
    state.apply_job("ADDED", recreated)
    assert ("default", "ghost") in state.jobs


def test_an_older_pod_event_never_replaces_a_newer_one():
    state = ClusterState()
    new = {"metadata": {"name": "p", "namespace": "d", "resourceVersion": "20", "uid": "u"},
           "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    old = copy.deepcopy(new)
    old["metadata"]["resourceVersion"] = "10"
    old["spec"]["nodeName"] = None
    state.apply_pod("MODIFIED", new)
    state.apply_pod("MODIFIED", old)
    assert state.pods[("d", "p")].node_name == "n1"


# --- 4. every resource counted, never less than the requests ---------------------------------------

def test_gpu_annotation_claiming_fewer_gpus_than_requested_counts_the_request():
    nodes = profile_nodes(leaves=1, tors=1, nodes=1)
    state = ClusterState()
    state.replace("nodes", nodes, None)
    name = nodes[0]["metadata"]["name"]
    pod = {"metadata": {"name": "p", "namespace": "d", "annotations": {"railyard.dev/gpus": "0,1"}},
           "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
           "status": {"phase": "Running"}}
    state.apply_pod("ADDED", pod)
    assert state.snapshot().free_gpus == 0


def test_cpu_memory_pods_and_extended_resources_bound_the_placement():
    nodes = profile_nodes(leaves=1, tors=1, nodes=2, cpu="8", memory="64Gi")
    for n in nodes:
        n["status"]["allocatable"]["rdma/ib"] = "1"
    state = ClusterState()
    state.replace("nodes", nodes, None)
    state.replace("pods", [{"metadata": {"name": "hog", "namespace": "d"},
                            "spec": {"nodeName": nodes[0]["metadata"]["name"],
                                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "7"}}}],
                                     "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "7500m"}}}]},
                            "status": {"phase": "Running"}}], None)
    snap = state.snapshot()
    job = make_job("t", 2, gpus=1)
    job["metadata"]["namespace"] = "d"
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "rdma/ib": "1"}
    from railyard.topology.api.job import TrainingJob

    request = GangRequest.from_job(TrainingJob.model_validate(job))
    decision = solve(snap, request)
    assert decision.placement is None
    assert "insufficient cpu" in (decision.reason or ""), decision.reason  # init container 7.5 of 8 cpu
    one = solve(snap, GangRequest.from_job(TrainingJob.model_validate({**job, "spec": {**job["spec"], "replicas": 1}})))
    assert one.placement is not None and one.placement.replicas[0].node == nodes[1]["metadata"]["name"]
    # a second pod on node 1 would need a second rdma/ib: the extended resource bounds it to one replica
    two_on_one = snap.without_nodes(frozenset({nodes[0]["metadata"]["name"]}))
    assert solve(two_on_one, request).placement is None


# --- 5. graceful deletes ---------------------------------------------------------------------------

def _terminating(name: str, node: str, seconds_ago: float) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))
    return {"metadata": {"name": name, "namespace": "default", "deletionTimestamp": stamp,
                         "labels": {"railyard.dev/job-name": "j"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
            "status": {"phase": "Running"}}


def test_terminating_pods_keep_their_gpus_and_are_forced_only_on_a_gone_node_after_a_wait():
    nodes = profile_nodes(leaves=1, tors=1, nodes=1)
    state = ClusterState()
    state.replace("nodes", nodes, None)
    live = nodes[0]["metadata"]["name"]
    state.apply_pod("ADDED", _terminating("a", live, 300))
    assert state.snapshot().free_gpus == 0, "a Terminating pod still holds its GPUs"
    job = {**make_job("j", 1), "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    job["metadata"]["namespace"] = "default"
    snap = state.snapshot()
    pods = [pod_view(_terminating("a", live, 300)), pod_view(_terminating("b", "vanished", 300)),
            pod_view(_terminating("c", "vanished", 5))]
    action = assess(parse_job(job), pods, snap, time.time(), 60, force_after=60)
    assert isinstance(action, Cleanup) and action.force == ("b",)


def test_pods_are_deleted_with_their_grace_period():
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=2))
    state = synced(api)
    placer = placer_for(state, api)
    submit(api, state, make_job("g", 2, annotations={}, faultPolicy={"maxRestarts": 0}))
    run(placer.run_once())
    failed = copy.deepcopy(api.objects["pods"][("default", "g-0")])
    failed["status"] = {"phase": "Failed"}
    state.apply_pod("MODIFIED", api._store("pods", failed, "MODIFIED"))
    run(placer.run_once())  # marks Failed
    run(placer.run_once())  # cleans up the rest of the gang
    graces = [grace for _, grace in api.deletions]
    assert graces == [None], graces


# --- 9. no write storms ----------------------------------------------------------------------------

def test_an_unschedulable_job_writes_once_while_only_counts_change():
    api, state, placer = operator_over(4)
    submit(api, state, make_job("huge", 1000))
    run(placer.run_once())
    assert placed_reason(api, "huge") == "Unschedulable"
    writes = len(api.writes)
    for i in range(5):  # capacity moves (a small job comes and goes), the binding constraint does not
        submit(api, state, make_job(f"filler{i}", 1))
        run(placer.run_once())
        api.delete_job("default", f"filler{i}")
        for kind, event, obj in api.log[-8:]:
            state.apply(kind, event, obj)
        run(placer.run_once())
    huge_writes = [w for w in api.writes[writes:] if w == ("PATCH", "trainingjobs/huge/status")]
    assert huge_writes == []
    warnings = [e for e in api.posted_events if e["reason"] == "Unschedulable"]
    assert len(warnings) == 1


# --- 10. cost per iteration ------------------------------------------------------------------------

def test_an_unschedulable_job_is_not_solved_again_until_capacity_is_freed(monkeypatch):
    api, state, placer = operator_over(2)
    solves: list[str] = []
    import railyard.operator.decide.pass_plan as placing_module

    real = placing_module.decide

    def counting(snapshot, request, pods=()):
        solves.append(request.name)
        return real(snapshot, request, pods)

    monkeypatch.setattr(placing_module, "decide", counting)
    api.create_job(make_job("blocker", 2))
    api.create_job(make_job("waiter", 2))
    for kind, event, obj in api.log:
        state.apply(kind, event, obj)
    run(placer.run_once())
    run(placer.run_once())
    run(placer.run_once())
    assert solves.count("waiter") == 1, solves
    api.delete_job("default", "blocker")
    for kind, event, obj in api.log[-3:]:
        state.apply(kind, event, obj)
    run(placer.run_once())
    assert solves.count("waiter") == 2 and placed_reason(api, "waiter") == "Released"


def test_usage_is_incremental_not_rebuilt_from_every_pod(monkeypatch):
    nodes = profile_nodes(leaves=1, tors=2, nodes=4)
    state = ClusterState()
    state.replace("nodes", nodes, None)
    pods = [{"metadata": {"name": f"p{i}", "namespace": "d"},
             "spec": {"nodeName": nodes[i % 8]["metadata"]["name"],
                      "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
             "status": {"phase": "Running"}} for i in range(40)]
    state.replace("pods", pods, None)
    state.snapshot()
    import railyard.operator.cache.usage as usage_module

    computed: list[int] = []
    real = usage_module.gpus_in_use

    def counting(count, usages):
        computed.append(1)
        return real(count, usages)

    monkeypatch.setattr(usage_module, "gpus_in_use", counting)
    state.apply_pod("DELETED", pods[0])
    snap = state.snapshot()
    assert len(computed) == 1, "only the node whose pod changed is recomputed"
    assert snap.free_gpus == 64 - 39


# --- 3. conditional status writes and the lease clock ----------------------------------------------

def test_a_status_write_against_a_changed_job_is_refused_then_redecided():
    api, state, placer = operator_over(2)
    submit(api, state, make_job("edited", 1))
    # Someone changes the job; the watch has not told the operator yet.
    edited = copy.deepcopy(api.objects["trainingjobs"][("default", "edited")])
    edited["spec"]["checkpoint"] = {"path": "/ckpt/seven"}
    api._store("trainingjobs", edited, "MODIFIED")
    run(placer.run_once())
    assert not job_status(api, "edited").get("placement"), "a write based on a stale read went through"
    assert state.jobs[("default", "edited")].body["spec"]["checkpoint"] == {"path": "/ckpt/seven"}, \
        "the 409 made the operator re-read"
    run(placer.run_once())
    assert placed_reason(api, "edited") == "Released"


class LeaseApi:
    """Just enough of KubeApi for the elector: one Lease held by another replica."""

    def __init__(self, renew_time: str) -> None:
        self.lease = {"metadata": {"resourceVersion": "1"},
                      "spec": {"holderIdentity": "other", "renewTime": renew_time, "leaseDurationSeconds": 10}}
        self.puts = 0

    def lease_path(self, namespace, name=None):
        return "lease"

    def request(self, method, path, body=None, timeout=None):
        if method == "PUT":
            self.puts += 1
            self.lease = copy.deepcopy(body)
            return body
        return copy.deepcopy(self.lease)


def test_the_leader_publishes_its_label_scheme_on_the_lease_keeping_other_annotations():
    """`railyard` commands read node labels as the operator does from these annotations."""
    from railyard.operator.base.keys import ANNOTATION_LABEL_PRESET, ANNOTATION_TOPOLOGY_LEVELS
    from railyard.operator.base.settings import LeaderSettings
    from railyard.operator.kube.leader import LeaderElector

    api = LeaseApi("2025-01-01T00:00:00.000000Z")
    api.lease["spec"]["holderIdentity"] = "me"
    api.lease["metadata"]["annotations"] = {"team": "infra"}
    published = {ANNOTATION_LABEL_PRESET: "aws,gfd", ANNOTATION_TOPOLOGY_LEVELS: "zone=example.com/zone"}
    elector = LeaderElector(api, LeaderSettings(identity="me"), lambda: None, ManualClock(), annotations=published)
    assert elector._try_acquire_or_renew() is True
    assert api.lease["metadata"]["annotations"] == {"team": "infra", **published}


def test_lease_expiry_is_timed_on_this_replicas_clock_not_the_holders():
    from railyard.operator.base.settings import LeaderSettings
    from railyard.operator.kube.leader import LeaderElector

    # The holder's clock is a year behind: comparing its renewTime with ours would steal the lease.
    api = LeaseApi("2025-01-01T00:00:00.000000Z")
    clock = ManualClock()
    elector = LeaderElector(api, LeaderSettings(identity="me", lease_seconds=10), lambda: None, clock)
    assert elector._try_acquire_or_renew() is False  # first sight of the record starts our timer
    clock.advance(5)
    assert elector._try_acquire_or_renew() is False
    api.lease["spec"]["renewTime"] = "2025-01-01T00:00:02.000000Z"  # the holder renewed
    api.lease["metadata"]["resourceVersion"] = "2"
    clock.advance(8)
    assert elector._try_acquire_or_renew() is False, "a renewal seen 0 s ago is not expired"
    clock.advance(11)  # no change seen for longer than leaseDurationSeconds
    assert elector._try_acquire_or_renew() is True and api.puts == 1


# --- node loss: replacement and gang restart ---------------------------------------------------------

def _not_ready(api: FakeApi, state: ClusterState, name: str) -> None:
    not_ready(api, state, name)


def test_a_lost_node_restarts_the_gang_with_survivors_in_place_even_across_a_crash(monkeypatch):
    api, state, placer = operator_over(4)
    submit(api, state, make_job("gang", 2))
    run(placer.run_once())
    first = {r["rank"]: r["node"] for r in job_status(api, "gang")["placement"]["ranks"]}
    _not_ready(api, state, first[1])

    async def crash(*args, **kwargs):
        raise RuntimeError("operator killed after the write-ahead status")

    delete = placer.pods.delete
    monkeypatch.setattr(placer.pods, "delete", crash)
    run(placer.run_once())
    status = job_status(api, "gang")
    assert status["restartCount"] == 1 and status["lastRestart"]["lostNodes"] == [first[1]]
    assert {p for (_, p) in api.objects["pods"]} == {"gang-0", "gang-1"}, "the crash came before any pod change"
    monkeypatch.setattr(placer.pods, "delete", delete)
    fresh = synced(api)  # a new leader
    successor = placer_for(fresh, api)
    run(successor.run_once())
    ranks = {r["rank"]: r["node"] for r in job_status(api, "gang")["placement"]["ranks"]}
    assert ranks[0] == first[0] and ranks[1] not in (first[0], first[1])
    taints = api.objects["nodes"][("", first[1])]["spec"]["taints"]
    assert {"key": "railyard.dev/unhealthy", "value": "NodeNotReady", "effect": "NoSchedule"} in taints
    assert {p for (_, p) in api.objects["pods"]} == {"gang.p1-0", "gang.p1-1"}
    assert placed_reason(api, "gang") == "Released"
    env = {e["name"]: e["value"] for e in api.objects["pods"][("default", "gang.p1-1")]["spec"]["containers"][0]["env"]}
    assert env["RAILYARD_RESTART_COUNT"] == "1" and env["RAILYARD_RESTART_REASON"] == "NodeNotReady"


def test_no_replacement_requeues_the_whole_gang_or_fails_it_as_the_policy_says():
    for policy, expect in (("Requeue", "NoReplacement"), ("Fail", None)):
        api, state, placer = operator_over(2)
        submit(api, state, make_job("tight", 2, faultPolicy={"onNoReplacement": policy,
                                                             "replacementTimeoutSeconds": 0}))
        run(placer.run_once())
        lost = job_status(api, "tight")["placement"]["ranks"][0]["node"]
        _not_ready(api, state, lost)
        run(placer.run_once())
        status = job_status(api, "tight")
        if expect:
            assert placed_reason(api, "tight") == expect and not status.get("placement")
            assert status["restartCount"] == 1
        else:
            assert cond.is_true(status["conditions"], cond.FAILED)
            assert cond.get(status["conditions"], cond.FAILED)["reason"] == "NoReplacement"
        assert not api.objects["pods"], "every pod of the old generation is deleted"


def _age_condition(api: FakeApi, state: ClusterState, name: str, type_: str, seconds: float) -> None:
    job = copy.deepcopy(api.objects["trainingjobs"][("default", name)])
    for c in job["status"]["conditions"]:
        if c["type"] == type_:
            c["lastTransitionTime"] = iso(time.time() - seconds)
    state.apply_job("MODIFIED", api._store("trainingjobs", job, "MODIFIED"))


def test_without_a_replacement_healthy_ranks_keep_their_nodes_until_the_timeout():
    api, state, placer = operator_over(2)
    submit(api, state, make_job("tight", 2, faultPolicy={"replacementTimeoutSeconds": 120}))
    run(placer.run_once())
    ranks = job_status(api, "tight")["placement"]["ranks"]
    _not_ready(api, state, ranks[0]["node"])
    run(placer.run_once())
    status = job_status(api, "tight")
    degraded = cond.get(status["conditions"], cond.DEGRADED)
    assert degraded["status"] == "True" and degraded["reason"] == "NoReplacement", degraded
    assert status["placement"]["ranks"] == ranks and not status.get("restartCount"), "nothing moved yet"
    assert [u["name"] for u in status["unhealthyNodes"]] == [ranks[0]["node"]]
    writes = len(api.writes)
    run(placer.run_once())
    assert not [w for w in api.writes[writes:] if "trainingjobs" in w[1]], "waiting writes nothing new"
    _age_condition(api, state, "tight", cond.DEGRADED, 121)
    run(placer.run_once())
    status = job_status(api, "tight")
    assert placed_reason(api, "tight") == "NoReplacement" and not status.get("placement")
    assert status["restartCount"] == 1 and cond.get(status["conditions"], cond.DEGRADED)["reason"] == "Requeued"


def test_a_replacement_that_frees_up_within_the_timeout_is_used():
    api, state, placer = operator_over(3)
    submit(api, state, make_job("blocker", 1))
    submit(api, state, make_job("tight", 2, faultPolicy={"replacementTimeoutSeconds": 120}))
    run(placer.run_once())
    ranks = job_status(api, "tight")["placement"]["ranks"]
    _not_ready(api, state, ranks[0]["node"])
    run(placer.run_once())
    assert cond.get(job_status(api, "tight")["conditions"], cond.DEGRADED)["status"] == "True"
    blocker = copy.deepcopy(api.objects["trainingjobs"][("default", "blocker")])
    blocker["status"]["conditions"] = cond.set_condition(blocker["status"]["conditions"], cond.SUCCEEDED, "True",
                                                         "AllSucceeded", "done", 1)
    state.apply_job("MODIFIED", api._store("trainingjobs", blocker, "MODIFIED"))
    run(placer.run_once())  # the finished job's pods are cleaned up: its node frees
    for kind, event, obj in list(api.log):
        state.apply(kind, event, obj)
    run(placer.run_once())
    status = job_status(api, "tight")
    assert status["restartCount"] == 1 and status["lastRestart"]["replacements"][0]["lost"] == ranks[0]["node"]
    assert status["placement"]["ranks"][1]["node"] == ranks[1]["node"], "the healthy rank kept its node"
    conditions = status["conditions"]
    assert cond.get(conditions, cond.DEGRADED)["status"] == "False"
    assert cond.get(conditions, cond.RESTARTING)["status"] == "False" and status["lastRestart"]["releasedAt"]


def _gpu_fault(api: FakeApi, state: ClusterState, name: str) -> None:
    """An untolerated NoExecute taint (a GPU health agent's): a signal that arrives at once."""
    node = copy.deepcopy(api.objects["nodes"][("", name)])
    node["spec"]["taints"] = [{"key": "nvidia.com/gpu-xid-error", "value": "79", "effect": "NoExecute"}]
    state.apply_node("MODIFIED", api._store("nodes", node, "MODIFIED"))


def _placed_on_a_clock():
    """A 3-replica job placed by a placer (2 s debounce) whose clock the test moves."""
    clock = ManualClock(wall=time.time())
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=6))
    state = synced(api, ClusterState(clock=clock))
    placer = placer_for(state, api, debounce=2.0, clock=clock)
    submit(api, state, make_job("pair", 3))
    run(placer.run_once())
    nodes = [r["node"] for r in job_status(api, "pair")["placement"]["ranks"]]
    return api, state, placer, clock, nodes


def test_losses_close_together_make_one_restart():
    api, state, placer, clock, nodes = _placed_on_a_clock()
    _gpu_fault(api, state, nodes[0])
    run(placer.run_once())
    assert not job_status(api, "pair").get("restartCount"), "inside the debounce window"
    clock.advance(1.0)
    _gpu_fault(api, state, nodes[1])
    run(placer.run_once())
    clock.advance(1.5)
    run(placer.run_once())
    status = job_status(api, "pair")
    assert status["restartCount"] == 1 and sorted(status["lastRestart"]["lostNodes"]) == sorted(nodes[:2])


def test_heartbeat_losses_wait_longer_than_other_signals():
    # Nodes that die together turn NotReady several seconds apart (lease renewals, monitor period).
    api, state, placer, clock, nodes = _placed_on_a_clock()  # NotReady: 10 s
    _not_ready(api, state, nodes[0])
    run(placer.run_once())
    clock.advance(6.0)  # past the 2 s window of other signals
    run(placer.run_once())
    assert not job_status(api, "pair").get("restartCount"), "a heartbeat loss waits its own window"
    _not_ready(api, state, nodes[1])
    clock.advance(4.5)
    run(placer.run_once())
    status = job_status(api, "pair")
    assert status["restartCount"] == 1 and sorted(status["lastRestart"]["lostNodes"]) == sorted(nodes[:2])


def test_a_node_lost_while_the_restart_is_being_decided_is_replaced_too():
    from railyard.operator.decide.actions import Restart
    from railyard.topology.cluster.faults import LossReason, NodeLoss

    api, state, placer = operator_over(6)
    submit(api, state, make_job("race", 3))
    run(placer.run_once())
    nodes = [r["node"] for r in job_status(api, "race")["placement"]["ranks"]]
    _not_ready(api, state, nodes[0])
    _not_ready(api, state, nodes[1])  # lands after the decision that saw only nodes[0]
    job = state.jobs[("default", "race")]
    assert job.request is not None
    action = Restart(LossReason.NODE_NOT_READY, "m", job.request,
                     losses=(NodeLoss(nodes[0], LossReason.NODE_NOT_READY, "m", None),))

    async def restart() -> None:
        await placer.recovery.carry_out(job, action)
        await placer.materialiser.drained()

    run(restart())
    status = job_status(api, "race")
    assert sorted(status["lastRestart"]["lostNodes"]) == sorted(nodes[:2])
    assert {r["node"] for r in status["placement"]["ranks"]}.isdisjoint(nodes[:2])


# --- stragglers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("debounce", [0, 5], ids=["restart-at-once", "restart-behind-its-gate"])
def test_a_straggler_is_checkpointed_then_evicted_and_its_node_quarantined(debounce):
    from railyard.operator.decide.reports import WorkerReport

    clock = ManualClock(wall=1_800_000_000.0)
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=6))
    state = synced(api, ClusterState(clock=clock))
    placer = PlacementLoop(state, api, operator_settings(loss_debounce_seconds=debounce, report_flush_seconds=0),
                           lambda: True, clock=clock)
    policy = {"action": "Evict", "threshold": 0.85, "minDurationSeconds": 60, "warmupSteps": 0,
              "window": {"steps": 20, "seconds": 0}}
    submit(api, state, make_job("slowpoke", 4, stragglerPolicy=policy))
    run(placer.run_once())
    api.bind_released()
    for kind, event, obj in api.log:
        state.apply(kind, event, obj)
    run(placer.run_once())
    assert cond.is_true(job_status(api, "slowpoke")["conditions"], cond.RUNNING)
    ranks = job_status(api, "slowpoke")["placement"]["ranks"]
    slow_node = ranks[2]["node"]

    def report(step: int, saved: tuple[int, ...] = ()) -> None:
        for r in range(4):
            placer.book.record(WorkerReport.model_validate({
                "namespace": "default", "job": "slowpoke", "rank": r, "generation": 0, "step": step,
                "samples": [[step, 1.3 if r == 2 else 1.0, 1.5]],
                "checkpoints": [{"step": s, "path": f"/c/{s}"} for s in saved]}), clock.wall)

    step = 0
    while not placer.book.directives(("default", "slowpoke")) and step < 400:
        report(step)
        clock.advance(1.5)
        if step % 4 == 0:
            run(placer.run_once())
        step += 1
    target = placer.book.directives(("default", "slowpoke"))["checkpoint"]["step"]
    status = job_status(api, "slowpoke")
    assert 40 <= step <= 80, "flagged after minDurationSeconds (60 s = 40 steps of 1.5 s), then a checkpoint asked"
    assert [(s["node"], s["action"]) for s in status["stragglers"]] == [(slow_node, "CheckpointRequested")]
    assert cond.get(status["conditions"], cond.STRAGGLING)["reason"] == "Slow"
    assert [e["message"] for e in api.posted_events if e["reason"] == "StragglerDetected"][:1] == \
        [f"{slow_node}: score 0.77"]
    assert status["stepTime"]["p50Seconds"] == 1.5
    assert target > step, "a step every rank has yet to reach"
    while step <= target:
        report(step, saved=(target,) if step == target else ())
        step += 1
    run(placer.run_once())  # the reports' flush decides the eviction: the node is marked for the next look
    assert "restartCount" not in job_status(api, "slowpoke"), "a restart like any other: through its gate"
    passes = 0
    while "restartCount" not in job_status(api, "slowpoke") and passes < 10:
        # The ranks report on (still slow) while the restart waits its turn: no second eviction, no second save.
        report(step)
        step += 1
        clock.advance(1.5)
        run(placer.run_once())
        passes += 1
        asked = placer.book.directives(("default", "slowpoke")).get("checkpoint")
        assert asked is None or asked["step"] == target, f"a second checkpoint asked for: {asked}"
    status = job_status(api, "slowpoke")
    assert status["restartCount"] == 1 and status["lastRestart"]["reason"] == "Straggler"
    assert status["lastRestart"]["lostNodes"] == [slow_node] and status["lastRestart"]["resumeStep"] == target
    assert status["lastCheckpoint"]["step"] == target and not status.get("stragglers")
    assert slow_node not in {r["node"] for r in status["placement"]["ranks"]}
    taints = api.objects["nodes"][("", slow_node)]["spec"].get("taints") or []
    assert {"key": "railyard.dev/unhealthy", "value": "Straggler", "effect": "NoSchedule"} in taints
    assert not placer.book.directives(("default", "slowpoke")), "the request ends with the generation"
    # The quarantine of a straggler is timed (stragglerPolicy.quarantineSeconds, 3600 by default).
    until = api.objects["nodes"][("", slow_node)]["metadata"]["annotations"]["railyard.dev/quarantined-until"]
    assert epoch(until, 0) == pytest.approx(clock.wall + 3600, abs=2)
    state.apply_node("MODIFIED", api.objects["nodes"][("", slow_node)])
    clock.advance(3601)
    run(placer.run_once())
    node = api.objects["nodes"][("", slow_node)]
    assert not [t for t in node["spec"].get("taints") or [] if t["key"] == "railyard.dev/unhealthy"]
    assert "railyard.dev/quarantined-until" not in (node["metadata"].get("annotations") or {})


def test_a_straggler_under_report_only_is_never_evicted():
    from railyard.operator.decide.reports import WorkerReport

    clock = ManualClock(wall=1_800_000_000.0)
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=6))
    state = synced(api, ClusterState(clock=clock))
    placer = PlacementLoop(state, api, operator_settings(report_flush_seconds=0), lambda: True, clock=clock)
    submit(api, state, make_job("watched", 2, stragglerPolicy={"minDurationSeconds": 30, "warmupSteps": 0,
                                                               "window": {"seconds": 0}}))
    run(placer.run_once())
    api.bind_released()
    for kind, event, obj in api.log:
        state.apply(kind, event, obj)
    for step in range(300):
        for r in range(2):
            placer.book.record(WorkerReport.model_validate({
                "namespace": "default", "job": "watched", "rank": r, "generation": 0, "step": step,
                "samples": [[step, 2.0 if r == 1 else 1.0, 2.1]]}), clock.wall)
        clock.advance(2)
        if step % 10 == 0:
            run(placer.run_once())
    status = job_status(api, "watched")
    assert not status.get("restartCount") and status["stragglers"][0]["action"] == "Reported"
    assert cond.get(status["conditions"], cond.STRAGGLING)["status"] == "True"


# --- elastic resize -------------------------------------------------------------------------------

def _running(api: FakeApi, state: ClusterState, placer: PlacementLoop) -> None:
    """kube-scheduler binds what was released; the operator sees it and marks the gang Running."""
    run(placer.run_once())
    api.bind_released()
    for kind, event, obj in list(api.log):
        state.apply(kind, event, obj)
    api.log.clear()
    run(placer.run_once())


def _scale(api: FakeApi, state: ClusterState, name: str, replicas: int) -> None:
    """`kubectl scale tj NAME --replicas=N` (the scale subresource writes spec.replicas)."""
    job = copy.deepcopy(api.objects["trainingjobs"][("default", name)])
    job["spec"]["replicas"] = replicas
    job["metadata"]["generation"] = job["metadata"].get("generation", 1) + 1
    state.apply_job("MODIFIED", api._store("trainingjobs", job, "MODIFIED"))


def _env(api: FakeApi, pod: str) -> dict[str, str]:
    return {e["name"]: e["value"] for e in api.objects["pods"][("default", pod)]["spec"]["containers"][0]["env"]}


def test_kubectl_scale_shrinks_and_grows_a_running_gang():
    api, state, placer = operator_over(6)
    submit(api, state, make_job("elastic", 4, minReplicas=1, maxReplicas=6))
    _running(api, state, placer)
    first = {r["rank"]: r["node"] for r in job_status(api, "elastic")["placement"]["ranks"]}
    _scale(api, state, "elastic", 2)
    _running(api, state, placer)
    status = job_status(api, "elastic")
    assert status["restartCount"] == 1 and status["lastRestart"]["reason"] == "ScaleDown"
    assert status["replicas"] == 2 and status["placement"]["desiredReplicas"] == 2
    kept = [r["node"] for r in sorted(status["placement"]["ranks"], key=lambda r: r["rank"])]
    assert set(kept) <= set(first.values()), "a shrink keeps replicas where they are"
    env = _env(api, "elastic.p1-0")
    assert env["WORLD_SIZE"] == "2" and env["RAILYARD_PREV_WORLD_SIZE"] == "4" and env["PET_NNODES"] == "1:6"
    _scale(api, state, "elastic", 5)
    _running(api, state, placer)
    status = job_status(api, "elastic")
    assert status["restartCount"] == 2 and status["lastRestart"]["reason"] == "ScaleUp" and status["replicas"] == 5
    ranks = {r["rank"]: r["node"] for r in status["placement"]["ranks"]}
    assert [ranks[0], ranks[1]] == kept, "a grow keeps the current ranks on their nodes"
    assert len(set(ranks.values())) == 5 and cond.is_true(status["conditions"], cond.RUNNING)


def test_a_grow_without_room_waits_below_desired():
    api, state, placer = operator_over(3)
    submit(api, state, make_job("elastic", 2, minReplicas=1, maxReplicas=6))
    _running(api, state, placer)
    _scale(api, state, "elastic", 5)  # 3 nodes: at most one more replica fits
    run(placer.run_once())
    status = job_status(api, "elastic")
    assert status["restartCount"] == 1 and status["replicas"] == 3, "grows as far as it can"
    below = cond.get(status["conditions"], cond.BELOW_DESIRED)
    assert below["status"] == "True", below


def test_no_replacement_with_shrink_continues_on_the_survivors_and_grows_back():
    api, state, placer = operator_over(3)
    submit(api, state, make_job("elastic", 3, minReplicas=2, faultPolicy={
        "onNoReplacement": "Shrink", "replacementTimeoutSeconds": 0}, elasticPolicy={"cooldownSeconds": 0}))
    _running(api, state, placer)
    lost = job_status(api, "elastic")["placement"]["ranks"][1]["node"]
    _not_ready(api, state, lost)
    run(placer.run_once())
    status = job_status(api, "elastic")
    assert status["restartCount"] == 1 and status["replicas"] == 2 and status["lastRestart"]["lostNodes"] == [lost]
    assert lost not in {r["node"] for r in status["placement"]["ranks"]}
    assert cond.is_true(status["conditions"], cond.BELOW_DESIRED)
    _running(api, state, placer)
    # The node comes back and an admin lifts the quarantine: the job grows back to 3.
    node = copy.deepcopy(api.objects["nodes"][("", lost)])
    node["spec"]["taints"] = []
    for c in node["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="True")
    state.apply_node("MODIFIED", api._store("nodes", node, "MODIFIED"))
    _running(api, state, placer)
    status = job_status(api, "elastic")
    assert status["restartCount"] == 2 and status["replicas"] == 3 and status["lastRestart"]["reason"] == "ScaleUp"
    assert cond.get(status["conditions"], cond.BELOW_DESIRED)["status"] == "False"


def test_a_burst_of_gangs_is_materialised_in_turn_so_the_first_is_released_before_the_last_is_created():
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=12))
    state = synced(api)
    # 2 request workers: at most 4 pods of placed gangs in flight; each gang here has 4 (no express lane: the
    # line's order is what is tested).
    placer = PlacementLoop(state, api, operator_settings(api_workers=2, express_pods=0), lambda: True)
    for name in ("first", "second", "third"):
        submit(api, state, make_job(name, 4))
    run(placer.run_once())
    assert [placed_reason(api, n) for n in ("first", "second", "third")] == ["Released"] * 3
    creates = [i for i, (verb, what) in enumerate(api.writes) if verb == "POST" and what == "pods"]
    releases = [i for i, (verb, what) in enumerate(api.writes) if verb == "PATCH" and what.startswith("pods/first-")]
    assert len(creates) == 12 and len(releases) == 4
    assert max(releases) < creates[8], "the third gang's pods were created before the first gang was released"


def test_gangs_of_one_pass_go_smallest_first_and_none_overtakes_a_gang_of_an_earlier_pass():
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=14))
    state = synced(api)
    placer = PlacementLoop(state, api, operator_settings(api_workers=2, express_pods=0), lambda: True)
    # Budget 4 pods in flight, no express lane. One pass places 6 (> budget) and 3 replicas; the next pass
    # places 1 and 4.
    for name, replicas in (("a-six", 6), ("b-three", 3)):
        submit(api, state, make_job(name, replicas))

    async def scenario() -> None:
        await placer.run_once(wait=False)
        for name, replicas in (("c-one", 1), ("d-four", 4)):
            submit(api, state, make_job(name, replicas))
        await placer.run_once(wait=False)
        await placer.materialiser.drained()

    run(scenario())
    assert [placed_reason(api, n) for n in ("a-six", "b-three", "c-one", "d-four")] == ["Released"] * 4
    released = [what.split("/")[1].rsplit("-", 1)[0] for verb, what in api.writes
                if verb == "PATCH" and what.startswith("pods/")]
    last = {job: max(i for i, j in enumerate(released) if j == job) for job in set(released)}
    first = {job: released.index(job) for job in set(released)}
    assert last["b-three"] < first["a-six"], f"the smaller gang of the first pass goes first: {released}"
    assert last["a-six"] < min(first["c-one"], first["d-four"]), f"a later pass overtook the large gang: {released}"
    assert last["c-one"] < first["d-four"], released


def test_the_loop_places_what_arrives_while_earlier_gangs_wait_for_their_turn():
    api, state, placer = operator_over(8)
    submit(api, state, make_job("first", 4))

    async def scenario() -> None:
        await placer.run_once(wait=False)
        # Recorded (its GPUs taken in the state), not yet created: the loop did not wait for it.
        assert job_status(api, "first")["placement"]["ranks"] and placed_reason(api, "first") == "Placing"
        submit(api, state, make_job("second", 4))
        await placer.run_once(wait=False)  # must not act on "first" (placed, no pods) a second time
        assert job_status(api, "second")["placement"]["ranks"]
        await placer.materialiser.drained()

    run(scenario())
    assert [placed_reason(api, n) for n in ("first", "second")] == ["Released"] * 2
    assert sum(1 for verb, what in api.writes if verb == "POST" and what == "pods") == 8, "no pod created twice"
    nodes = [r["node"] for n in ("first", "second") for r in job_status(api, n)["placement"]["ranks"]]
    assert len(set(nodes)) == 8, "the second placement saw the first one's GPUs as taken"


def test_a_restart_on_a_topology_with_a_zone_level_counts_domains_at_every_level():
    nodes = profile_nodes(leaves=1, tors=1, nodes=4)
    for node in nodes:
        node["metadata"]["labels"]["example.com/zone"] = "z0"
    api = FakeApi(nodes)
    scheme = parse_levels("zone=example.com/zone,spine=topology.railyard.dev/spine,leaf=topology.railyard.dev/leaf,"
                          "tor=topology.railyard.dev/tor")
    state = synced(api, ClusterState(scheme))
    placer = placer_for(state, api)
    submit(api, state, make_job("gang", 2, topology={"requiredTier": "zone"}))
    run(placer.run_once())
    first = {r["rank"]: r["node"] for r in job_status(api, "gang")["placement"]["ranks"]}
    _not_ready(api, state, first[1])
    run(placer.run_once())  # the replacement's placement is recorded with the cluster's levels
    status = job_status(api, "gang")
    assert status["restartCount"] == 1 and placed_reason(api, "gang") == "Released"
    assert [d["level"] for d in status["placement"]["domains"]] == ["zone", "spine", "leaf", "tor"]
    assert status["placement"]["domains"][0]["count"] == 1


def test_a_list_that_goes_back_in_time_resets_the_kind():
    # An etcd restore: the store's versions are older than what the state holds; without a reset the
    # restored objects would be refused as old versions and deleted objects would linger.
    api = FakeApi(profile_nodes(leaves=1, tors=1, nodes=2))
    state = synced(api)
    job = api.create_job(make_job("before-restore", 1))
    state.apply_job("ADDED", job)
    restored = copy.deepcopy(job)
    restored["metadata"]["resourceVersion"] = "50"  # the restored store is behind
    restored["spec"]["priorityClassName"] = "nine"
    state.replace("trainingjobs", [restored], 60)
    assert state.resets == 1
    assert state.jobs[("default", "before-restore")].body["spec"]["priorityClassName"] == "nine"


def test_a_tor_id_under_two_leaves_is_not_merged_into_one_switch():
    nodes = profile_nodes(leaves=2, tors=1, nodes=2)
    clash = [n for n in nodes if n["metadata"]["labels"]["topology.railyard.dev/leaf"].endswith("-1")]
    for node in clash:  # the second leaf's TOR carries the first leaf's TOR id
        node["metadata"]["labels"]["topology.railyard.dev/tor"] = nodes[0]["metadata"]["labels"][
            "topology.railyard.dev/tor"]
    state = ClusterState()
    state.replace("nodes", nodes, None)
    snapshot = state.snapshot()
    excluded = {e.node: e.reason for e in snapshot.excluded}
    assert set(excluded) == {n["metadata"]["name"] for n in clash} or \
        set(excluded) == {n["metadata"]["name"] for n in nodes if n not in clash}
    assert all("also under leaf" in why for why in excluded.values()), excluded


async def test_leadership_is_announced_once_when_it_starts_and_once_when_it_ends():
    """What the leader label hangs on: one call per change, never one per renewal."""
    from railyard.operator.base.settings import LeaderSettings
    from railyard.operator.kube.leader import LeaderElector

    api = LeaseApi("2025-01-01T00:00:00.000000Z")
    api.lease["spec"]["holderIdentity"] = None  # free: the first try takes it

    async def run(fn, *args):
        return fn(*args)

    api.run = run  # type: ignore[attr-defined]
    marks: list[bool] = []
    elector = LeaderElector(api, LeaderSettings(identity="me", lease_seconds=1, renew_seconds=0.01), lambda: None,
                            on_change=marks.append)
    task = asyncio.create_task(elector.run())
    deadline = time.monotonic() + 10
    while api.puts < 5:  # renewed several times
        assert time.monotonic() < deadline, "the elector never renewed"
        await asyncio.sleep(0.01)
    assert marks == [True]
    assert elector.first_attempt.is_set(), "what the operator waits for before its first lists"
    began = elector.term_began
    assert began is not None and began <= time.monotonic(), "when the term began: catch_up's fresh-list rule"
    api.lease["spec"].update(holderIdentity="other", renewTime="2025-01-01T00:00:09.000000Z")
    api.lease["metadata"]["resourceVersion"] = "9"
    while marks != [True, False]:
        assert time.monotonic() < deadline, f"the end of the term was not announced: {marks}"
        await asyncio.sleep(0.01)
    elector.stop()
    await asyncio.wait_for(task, 5)
    assert marks == [True, False]
