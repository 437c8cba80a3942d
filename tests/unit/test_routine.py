"""Routine operations of a shared GPU cluster, against the decision core (in-memory API): a cordon, a
pressure taint or a quarantine never restarts a running gang; a drain moves the drained node's ranks;
slow predecessors are waited for, not rolled back; a job that can never fit never reserves the
cluster; status stays bounded; infrastructure restarts back off; a mass NotReady trips the breaker."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest
from railyard.topology.api.job import PlacementStatus, RankPlacement, TrainingJobStatus

from tests.support import status as cond
from tests.support.harness import Rig, rig
from tests.support.jobs import make_job
from tests.support.nodes import cordon, not_ready, ready, taint, update_node

# --- loss means loss ---------------------------------------------------------------------------------


def test_a_cordon_or_a_noschedule_taint_never_restarts_a_running_gang_and_uncordon_leaves_nothing_behind():
    r = rig(nodes=4)
    r.submit(make_job("steady", 2))
    r.running()
    nodes = r.nodes_of("steady")
    cordon(r.api, r.state, nodes[0])
    taint(r.api, r.state, nodes[1], "node.kubernetes.io/memory-pressure", "NoSchedule")
    taint(r.api, r.state, nodes[1], "railyard.dev/unhealthy", "NoSchedule", "NodeNotReady")  # another job's
    r.step(3)
    assert not r.status("steady").get("restartCount"), "a cordon is not a loss"
    assert r.pods() == {"steady-0", "steady-1"}
    r.submit(make_job("newcomer", 2))
    r.step()
    assert set(r.nodes_of("newcomer")).isdisjoint(nodes), "new placements keep off cordoned and tainted nodes"
    cordon(r.api, r.state, nodes[0], on=False)
    r.step()
    assert not [t for t in r.taints(nodes[0]) if t["key"] == "railyard.dev/unhealthy"], "nothing to lift"


def test_a_quarantined_node_takes_no_new_ranks_even_from_a_job_that_tolerates_everything():
    r = rig(nodes=2)
    bad = sorted(n["metadata"]["name"] for n in r.api.listing("nodes")[0])[0]
    taint(r.api, r.state, bad, "railyard.dev/unhealthy", "NoSchedule", "GpuFault")
    job = make_job("tolerant", 1)
    job["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
    r.submit(job)
    r.step()
    assert r.nodes_of("tolerant") != [bad]
    assert r.state.snapshot().has_node(bad) is False


def test_a_drain_moves_the_drained_nodes_ranks_and_does_not_quarantine_it():
    r = rig(nodes=4)
    r.submit(make_job("drained", 2))
    r.running()
    nodes = r.nodes_of("drained")
    cordon(r.api, r.state, nodes[0])  # kubectl drain cordons, then evicts
    r.api.evict("default", "drained-0")
    r.deliver()
    r.step()
    status = r.status("drained")
    assert status["restartCount"] == 1 and status["lastRestart"]["reason"] == "Drained"
    assert status["lastRestart"]["lostNodes"] == [nodes[0]]
    moved = r.nodes_of("drained")
    assert nodes[0] not in moved and moved[1] == nodes[1], "the drained rank moved, the other kept its node"
    assert not [t for t in r.taints(nodes[0]) if t["key"] == "railyard.dev/unhealthy"], "a drain is no fault"
    assert all(grace is None for _, grace in r.api.deletions), "the kubelet is alive: every pod gets its grace"


def test_a_kubelet_restart_that_reports_no_gpus_for_a_moment_is_not_a_loss():
    r = rig(nodes=2)
    r.submit(make_job("patient", 1, faultPolicy={"nodeLossGraceSeconds": 30}))
    r.running()
    node = r.nodes_of("patient")[0]
    update_node(r.api, r.state, node, lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "0"}))
    r.clock.advance(5)
    r.step()
    update_node(r.api, r.state, node, lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "8"}))
    r.clock.advance(60)
    r.step()
    assert not r.status("patient").get("restartCount")
    update_node(r.api, r.state, node, lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "7"}))
    r.clock.advance(31)
    r.step()
    assert r.status("patient")["lastRestart"]["reason"] == "GpuAllocatableDropped", "a lasting drop is a loss"


def test_notready_counts_from_when_the_operator_saw_it_and_only_unreachable_nodes_get_grace_zero():
    r = rig(nodes=4, force_delete_seconds=60)
    r.submit(make_job("watched", 2, faultPolicy={"nodeLossGraceSeconds": 30}))
    r.running()
    nodes = r.nodes_of("watched")
    not_ready(r.api, r.state, nodes[0], seen_ago=0)  # the node's own timestamp says 2026-01-01
    r.step()
    assert not r.status("watched").get("restartCount"), "seen NotReady 0 s ago: inside the grace"
    r.clock.advance(31)
    r.step()
    status = r.status("watched")
    assert status["restartCount"] == 1 and status["lastRestart"]["reason"] == "NodeNotReady"
    graces = dict(r.api.deletions)
    assert graces["watched-0"] is None, "NotReady for 31 s < the force-delete time: its own grace period"
    taints = [t for t in r.taints(nodes[0]) if t["key"] == "railyard.dev/unhealthy"]
    assert taints and "railyard.dev/quarantined-until" in r.api.objects["nodes"][("", nodes[0])]["metadata"][
        "annotations"], "a NotReady node is quarantined, with an end"


# --- quarantine that ends --------------------------------------------------------------------------------


def test_a_quarantine_is_lifted_when_it_ends_but_a_gpu_fault_quarantine_stays_while_the_fault_does():
    r = rig(nodes=4, quarantine_seconds=600)
    r.submit(make_job("faulty", 2))
    r.running()
    nodes = r.nodes_of("faulty")
    fault = {"type": "GpuNvlinkWatch", "status": "True", "message": "NVLink down",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
    update_node(r.api, r.state, nodes[0], lambda n: n["status"]["conditions"].append(fault))
    r.step()
    assert r.status("faulty")["lastRestart"]["quarantine"][0]["node"] == nodes[0], "in the write-ahead record"
    assert [t["value"] for t in r.taints(nodes[0]) if t["key"] == "railyard.dev/unhealthy"] == ["GpuFault"]
    r.deliver()
    r.clock.advance(601)
    r.step()
    assert [t for t in r.taints(nodes[0]) if t["key"] == "railyard.dev/unhealthy"], "the fault is still True"
    update_node(r.api, r.state, nodes[0], lambda n: n["status"]["conditions"].remove(fault))
    r.step()
    assert not [t for t in r.taints(nodes[0]) if t["key"] == "railyard.dev/unhealthy"], "fault gone, time passed"


def test_an_operator_killed_after_recording_a_restart_leaves_the_quarantine_to_its_successor(monkeypatch):
    r = rig(nodes=4)
    r.submit(make_job("gang", 2))
    r.running()
    lost = r.nodes_of("gang")[1]
    not_ready(r.api, r.state, lost)

    async def killed(*args, **kwargs):
        raise RuntimeError("operator killed right after the write-ahead record")

    monkeypatch.setattr(r.loop.quarantine, "apply", killed)
    r.step()
    assert r.status("gang")["restartCount"] == 1 and not r.taints(lost)
    monkeypatch.undo()
    from railyard.operator.act.loop import PlacementLoop
    from railyard.operator.cache.state import KINDS, ClusterState

    state = ClusterState(clock=r.clock)  # a successor lists the cluster
    for kind in KINDS:
        items, rv = r.api.listing(kind)
        state.replace(kind, items, rv)
    asyncio.run(PlacementLoop(state, r.api, r.loop.ctx.settings, lambda: True).run_once())
    assert [t["value"] for t in r.taints(lost) if t["key"] == "railyard.dev/unhealthy"] == ["NodeNotReady"]


# --- restarts are not rolled back for waiting on their predecessors ---------------------------------------


def test_a_restart_whose_old_pods_take_their_grace_period_is_waited_for_not_rolled_back():
    r = rig(nodes=4, bind_timeout_seconds=60)
    r.submit(make_job("slow-exit", 2))
    r.running()
    r.api.graceful = True  # the old pods checkpoint on SIGTERM for a while
    first = r.nodes_of("slow-exit")
    failed = copy.deepcopy(r.api.objects["pods"][("default", "slow-exit-0")])
    failed["status"] = {"phase": "Failed"}
    r.api._store("pods", failed, "MODIFIED")
    r.deliver()
    r.step()  # the failure seen: the restart waits the process-failure backoff (10 s)
    r.clock.advance(11)
    r.step()
    assert r.status("slow-exit")["restartCount"] == 1
    r.api.bind_released(lambda pod: not any(  # kube-scheduler: a node with a Terminating pod is still full
        p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") == pod_node(pod)
        for p in r.api.objects["pods"].values()))
    r.deliver()
    for _ in range(4):  # 120 s with the predecessors still terminating
        r.clock.advance(30)
        r.step()
    assert r.reason("slow-exit") == "Released" and r.status("slow-exit")["restartCount"] == 1, "no BindTimeout"
    assert r.nodes_of("slow-exit") == first, "nothing was re-planned away from the gang's own nodes"
    assert not r.status("slow-exit").get("avoidNodes")
    r.api.finish_terminating()
    r.api.bind_released()
    r.deliver()
    r.step()
    assert cond.is_true(r.status("slow-exit")["conditions"], cond.RUNNING)


def test_a_restart_gets_its_full_bind_timeout_from_when_its_predecessors_leave():
    """Seen at 12,288 nodes: kwok took 8 min to delete a 1,024-rank gang's old pods, and 15 s after they
    left, with kube-scheduler still binding, the restart was rolled back for a bind timeout."""
    r = rig(nodes=4, bind_timeout_seconds=60)
    r.submit(make_job("slow-exit", 2))
    r.running()
    r.api.graceful = True
    failed = copy.deepcopy(r.api.objects["pods"][("default", "slow-exit-0")])
    failed["status"] = {"phase": "Failed"}
    r.api._store("pods", failed, "MODIFIED")
    r.deliver()
    r.step()
    r.clock.advance(11)
    r.step()
    assert r.status("slow-exit")["restartCount"] == 1
    for _ in range(16):  # 8 minutes with the predecessors terminating; nothing can bind meanwhile
        r.clock.advance(30)
        r.step()
    r.api.finish_terminating()
    r.deliver()
    r.clock.advance(15)  # a busy kube-scheduler has not bound the new pods yet
    r.step()
    assert r.reason("slow-exit") == "Released", "15 s after its predecessors left: not a bind timeout"
    r.clock.advance(61)
    r.step()
    assert r.reason("slow-exit") == "BindTimeout", "61 s after they left with nothing bound: re-planned"


def pod_node(pod: dict) -> str | None:
    from railyard.topology.cluster.nodes import pinned_node

    return pod["spec"].get("nodeName") or pinned_node(pod["spec"])


def test_a_rolled_back_placement_is_placed_again_under_new_pod_names():
    r = rig(nodes=4, bind_timeout_seconds=60)
    r.api.graceful = True
    r.submit(make_job("unlucky", 2))
    r.step()  # released; nothing binds (say another scheduler took the GPUs)
    r.clock.advance(61)
    r.step()
    assert r.reason("unlucky") == "BindTimeout"
    r.step()
    names = {p for p in r.pods() if not r.api.objects["pods"][("default", p)]["metadata"].get("deletionTimestamp")}
    assert names == {"unlucky.p1-0", "unlucky.p1-1"}, "never the name of a Terminating pod of the old placement"


# --- reservations only for jobs that can fit ------------------------------------------------------------------


def test_a_job_that_can_never_fit_says_so_and_never_reserves_the_cluster():
    r = rig(nodes=2, starvation_seconds=0)
    r.submit(make_job("impossible", 9))  # 9 whole nodes on a 2-node cluster
    r.clock.advance(10)
    r.step()
    assert r.reason("impossible") == "Unschedulable"
    assert "can never fit this cluster" in r.condition("impossible", cond.PLACED)["message"]
    r.submit(make_job("small", 1))
    r.step()
    assert r.reason("small") == "Released", "nothing is reserved for a job that cannot fit"


def _first_reserving(retry_seconds: float) -> Rig:
    """Two nodes a hog fills; `first`, then `second`, starving for both: `first` holds the reservation."""
    r = rig(nodes=2, starvation_seconds=0, reservation_seconds=100, retry_seconds=retry_seconds,
            bind_timeout_seconds=1e9)
    r.submit(make_job("hog", 2))
    r.step()
    r.submit(make_job("first", 2))
    r.clock.advance(1)
    r.submit(make_job("second", 2))
    r.clock.advance(1)
    r.step()
    assert (r.reason("first"), r.reason("second")) == ("Reserving", "Unschedulable")
    return r


@pytest.mark.parametrize("retry_seconds", [0, 1e9], ids=["solved-every-pass", "no-retry-no-capacity-freed"])
def test_reservations_are_time_boxed_and_rotate_between_starving_jobs(retry_seconds: float):
    """With no retry due and nothing freed, the job whose box ran out is still solved on that pass: its
    Placed reason must leave Reserving, or the next pass takes it for a holder and restarts its box."""
    r = _first_reserving(retry_seconds)
    r.clock.advance(101)
    r.step()
    assert (r.reason("first"), r.reason("second")) == ("Unschedulable", "Reserving"), "the box ran out: rotated"


def test_a_reservation_time_box_survives_a_leader_change():
    """A new leader with a blank memory takes the box as starting when Reserving did (the status says), not
    when it took over: a holder cannot keep its nodes for ever by outliving leaders."""
    import asyncio

    from railyard.operator.act.loop import PlacementLoop

    r = _first_reserving(0)
    r.clock.advance(101)
    successor = PlacementLoop(r.state, r.api, r.loop.ctx.settings, lambda: True, clock=r.clock)  # blank memory
    asyncio.run(successor.run_once())
    r.deliver()
    assert (r.reason("first"), r.reason("second")) == ("Unschedulable", "Reserving"), "its box ran out meanwhile"


def _starving_pair(**settings):
    """Two TORs of two nodes, each node busy with a 1-node job; then two gangs of one TOR's nodes."""
    r = rig(nodes=2, tors=2, starvation_seconds=0, retry_seconds=0, bind_timeout_seconds=1e9, **settings)
    for i in range(4):
        r.submit(make_job(f"hog{i}", 1))
    r.running()
    for name in ("first", "second"):
        r.submit(make_job(name, 2, topology={"requiredTier": "tor"}))
        r.clock.advance(1)
    r.step()
    return r


def test_starving_gangs_hold_disjoint_nodes_at_once_and_jobs_behind_them_get_none():
    r = _starving_pair(max_reservations=2)
    assert (r.reason("first"), r.reason("second")) == ("Reserving", "Reserving")
    tor = {name: r.state.snapshot().node(r.nodes_of(name)[0]).tor for name in ("hog0", "hog1", "hog2", "hog3")}
    r.succeed("hog0")
    r.succeed(next(h for h in tor if tor[h] != tor["hog0"]))  # a node in each TOR is free now
    r.submit(make_job("small", 1))
    r.step()
    assert not r.status("small").get("placement"), "a node freed inside a reservation went to a job behind it"
    r.succeed(next(h for h in tor if h != "hog0" and tor[h] == tor["hog0"]))
    r.step()
    winners = [name for name in ("first", "second") if r.status(name).get("placement")]
    assert len(winners) == 1, "one TOR freed: the gang holding it is placed, the other still waits"
    assert {r.state.snapshot().node(n).tor for n in r.nodes_of(winners[0])} == {tor["hog0"]}
    assert not r.status("small").get("placement"), "the other TOR is still held"


def test_by_default_one_starving_gang_holds_a_reservation_at_a_time():
    r = _starving_pair()
    assert sorted([r.reason("first"), r.reason("second")]) == ["Reserving", "Unschedulable"]


# --- bounded status ------------------------------------------------------------------------------------------


def test_unhealthy_nodes_stay_bounded_however_many_losses_a_job_survives():
    r = rig(nodes=40)
    r.submit(make_job("survivor", 1))
    r.running()
    for _ in range(36):
        lost = r.nodes_of("survivor")[0]
        not_ready(r.api, r.state, lost)
        r.loop.ctx.memories.recall(r.state.jobs[("default", "survivor")]).infra_restarts.clear()
        r.step()
        r.api.bind_released()
        r.deliver()
    assert r.status("survivor")["restartCount"] == 36
    assert len(r.status("survivor")["unhealthyNodes"]) <= 32


def test_a_16384_replica_placement_keeps_its_status_under_a_mebibyte():
    ranks = [RankPlacement(rank=i, node=f"gpu-node-{i:05d}.rack-{i // 32:03d}.example.com", gpus=list(range(8)),
                           pod=f"llama-405b.p3-{i}") for i in range(16384)]
    status = TrainingJobStatus(placement=PlacementStatus(id="p" * 10, serial=3, ranks=ranks, tors=512, leaves=16),
                               replicas=16384, restart_count=3)
    size = len(json.dumps(status.as_patch()))
    assert size < 2**20, size
    back = TrainingJobStatus.model_validate(json.loads(json.dumps(status.as_patch())))
    assert back.placement is not None and [(x.rank, x.node, x.gpus) for x in back.placement.ranks] == \
        [(x.rank, x.node, x.gpus) for x in ranks]


# --- infrastructure restarts back off -------------------------------------------------------------------------


def test_repeated_infrastructure_restarts_back_off_and_stop_at_the_hourly_cap():
    r = rig(nodes=2, infra_backoff_seconds=10, infra_backoff_max_seconds=40, infra_restarts_per_hour=3)
    r.submit(make_job("flaky", 1))
    r.running()

    def pod_deleted_then(wait: float) -> int:
        """Someone deletes the running rank; the operator looks again `wait` seconds later."""
        r.api.bind_released()
        r.deliver()
        r.api._remove("pods", ("default", next(iter(r.pods()))))
        r.deliver()
        r.clock.advance(wait)
        r.step()
        return int(r.status("flaky").get("restartCount") or 0)

    assert pod_deleted_then(0) == 1, "the first restart is at once"
    r.step()
    assert pod_deleted_then(0) == 1, "the second waits its backoff (10 s)"
    r.clock.advance(10)
    r.step()
    assert r.status("flaky")["restartCount"] == 2
    assert pod_deleted_then(20) == 3, "the third after 20 s"
    assert pod_deleted_then(40) == 3, "three in the hour: capped"
    status = r.status("flaky")
    assert (cond.get(status["conditions"], cond.DEGRADED) or {}).get("reason") == "RestartCap"
    assert not status.get("processRestarts"), "never counted against maxRestarts"
    r.clock.advance(3600)
    r.step()
    assert r.status("flaky")["restartCount"] == 4


# --- the circuit breaker ------------------------------------------------------------------------------------------


def test_half_the_nodes_going_dark_together_holds_the_fault_path_until_it_clears():
    r = rig(nodes=8, tors=2, breaker_min_nodes=3)
    r.submit(make_job("big", 8))
    r.submit(make_job("other", 4))
    r.running()
    dark = sorted({*r.nodes_of("big")})[:6]
    for node in dark:
        not_ready(r.api, r.state, node, seen_ago=35)  # past the 30 s grace, within the 60 s window
    r.step(2)
    for name in ("big", "other"):
        assert not r.status(name).get("restartCount"), f"{name}: restarted during a partition"
    assert not any(t["key"] == "railyard.dev/unhealthy" for n in dark for t in r.taints(n)), "no quarantine"
    assert r.api.deletions == [], "no pod deleted, forced or not"
    assert r.reason("big", cond.DEGRADED) == "Partition"
    for node in dark[1:]:
        ready(r.api, r.state, node)
    r.step(2)
    status = r.status("big")
    assert status["restartCount"] == 1 and status["lastRestart"]["lostNodes"] == [dark[0]], \
        "cleared: the one node still dark is a loss like any other"


def test_a_partition_that_clears_entirely_lifts_its_mark_and_restarts_nothing():
    r = rig(nodes=8, tors=2, breaker_min_nodes=3)
    r.submit(make_job("big", 8))
    r.running()
    dark = sorted({*r.nodes_of("big")})[:6]
    for node in dark:
        not_ready(r.api, r.state, node, seen_ago=35)
    r.step(2)
    assert r.reason("big", cond.DEGRADED) == "Partition"
    for node in dark:
        ready(r.api, r.state, node)
    r.step(2)
    assert r.reason("big", cond.DEGRADED) == "Recovered", "the mark is lifted once every node is back"
    assert not r.status("big").get("restartCount")


def test_a_single_node_loss_does_not_trip_the_breaker():
    r = rig(nodes=4)
    r.submit(make_job("gang", 2))
    r.running()
    not_ready(r.api, r.state, r.nodes_of("gang")[0])
    r.step()
    assert r.status("gang")["restartCount"] == 1


def test_a_status_write_that_keeps_failing_backs_off_and_never_stops_the_others():
    from railyard.operator.kube.client import ApiException

    r = rig(nodes=4)
    r.api.refuse_status["stuck"] = ApiException(status=422, reason="Unprocessable Entity")
    r.submit(make_job("stuck", 1))
    r.submit(make_job("fine", 1))
    attempts = []
    for _ in range(6):  # 6 passes within a few seconds
        r.step()
        attempts.append(sum(1 for w in r.api.writes if w == ("PATCH", "trainingjobs/stuck/status")))
        r.clock.advance(1)
    assert r.reason("fine") == "Released", "one job's failing writes stop nobody else"
    assert attempts[-1] <= 4, f"retried in a tight loop: {attempts}"
    events = [e for e in r.api.posted_events if e["reason"] == "InternalError"]
    assert events and "422" in events[0]["message"], events


def test_process_failure_backoff_doubles_for_quick_failures_and_resets_after_a_long_healthy_run():
    r = rig(nodes=2)
    r.submit(make_job("crashy", 1, faultPolicy={"maxRestarts": 10}))
    r.running()

    def fail_and_wait() -> float:
        """The current attempt's process fails; seconds until the gang restarts."""
        count = r.status("crashy").get("restartCount", 0)
        name = next(n for (_, n) in r.api.objects["pods"])
        failed = copy.deepcopy(r.api.objects["pods"][("default", name)])
        failed["status"] = {"phase": "Failed"}
        r.api._store("pods", failed, "MODIFIED")
        r.deliver()
        waited = 0.0
        r.step()
        while r.status("crashy").get("restartCount", 0) == count:
            r.clock.advance(1)
            waited += 1
            r.step()
            assert waited < 400
        r.api.finish_terminating()
        r.api.bind_released()
        r.deliver()
        r.step()
        return waited

    quick = [fail_and_wait() for _ in range(3)]
    assert quick[1] > quick[0] and quick[2] > quick[1], f"quick failures back off, doubling: {quick}"
    r.clock.advance(700)  # the attempt runs healthy for over 10 minutes
    r.step()
    assert fail_and_wait() <= quick[0] + 1, "a long healthy run resets the backoff (as the kubelet's)"


def test_a_job_whose_namespace_is_being_deleted_waits_to_go_with_it_not_invalid():
    """The API server refuses every create in a namespace being deleted: the job holds nothing and says why
    (NamespaceTerminating), not InvalidSpec, and is not retried while it waits to go."""
    import json

    from railyard.operator.kube.client import ApiException

    r = rig(nodes=2)
    refusal = ApiException(status=403, reason="Forbidden")
    refusal.body = json.dumps({"message": 'pods "doomed-0" is forbidden: unable to create new content in '
                                          "namespace default because it is being terminated"})
    r.api.refuse_pods = refusal
    r.submit(make_job("doomed", 1))
    r.step()
    assert r.reason("doomed") == "NamespaceTerminating" and not r.status("doomed").get("placement")
    creates = sum(1 for w in r.api.writes if w == ("POST", "pods"))
    r.clock.advance(120)
    r.step(2)
    assert sum(1 for w in r.api.writes if w == ("POST", "pods")) == creates, "not retried"
