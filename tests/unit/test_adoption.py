"""Workloads Railyard places without owning them (issue 46) against the decision core (in-memory API): a JobSet's
pods, gated, become one gang; Railyard keeps a TrainingJob for it, places it with the same solver, pins each pod
to its node by rank (the Job's offset plus the completion index) and ungates them together; it never creates or
deletes the owner's pods, and their GPUs count exactly like a TrainingJob's."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from railyard.topology.cluster.labels import LABEL_TOR
from railyard.topology.cluster.nodes import pinned_node

from tests.support import status as cond
from tests.support.harness import Rig, rig
from tests.support.jobs import make_job
from tests.support.workloads import fresh_pod as _fresh
from tests.support.workloads import jobset_pods as _jobset


def _adopted(r: Rig) -> dict[str, Any]:
    jobs = [j for j in r.api.objects["trainingjobs"].values() if (j["spec"].get("adopt") or {})]
    assert len(jobs) == 1, [j["metadata"]["name"] for j in jobs]
    return jobs[0]


def test_a_jobsets_pods_are_placed_as_one_gang_pinned_by_rank_and_released_together():
    r = rig(nodes=4, tors=1)
    names = _jobset(r, "train", jobs=2, parallelism=2)
    creates = sum(1 for w in r.api.writes if w == ("POST", "pods"))
    r.step()  # the TrainingJob for the gang is created
    job = _adopted(r)
    assert job["spec"]["replicas"] == 4 and job["spec"]["adopt"]["kind"] == "JobSet"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "JobSet", "gone with the JobSet"
    r.step(2)  # queued, placed, pinned, ungated
    status = _adopted(r)["status"]
    assert cond.get(status["conditions"], cond.PLACED)["reason"] in ("Placing", "Released")
    ranks = {rk["rank"]: rk for rk in status["placement"]["ranks"]}
    # rank = the Job's offset (global index x parallelism) + the completion index
    assert [ranks[i]["pod"] for i in range(4)] == names
    for rank in ranks.values():
        pod = r.api.objects["pods"][("default", rank["pod"])]
        assert pinned_node(pod["spec"]) == rank["node"] and not pod["spec"].get("schedulingGates")
        assert pod["metadata"]["annotations"]["railyard.dev/gpus"] == ",".join(map(str, rank["gpus"]))
        assert pod["metadata"]["uid"] == rank["podUid"]
    assert sum(1 for w in r.api.writes if w == ("POST", "pods")) == creates, "Railyard created no pod"
    assert len(r.state.snapshot().used) == 4, "their GPUs count"
    r.api.bind_released()
    r.deliver()
    r.step()
    assert cond.get(_adopted(r)["status"]["conditions"], cond.RUNNING)["status"] == "True"


def test_a_gang_waits_until_every_pod_exists_and_holds_nothing_meanwhile():
    r = rig(nodes=4, tors=1)
    names = _jobset(r, "partial", jobs=2, parallelism=2)
    import copy

    last = copy.deepcopy(r.api.objects["pods"][("default", names[-1])])
    r.api._remove("pods", ("default", names[-1]))  # as if not created yet (the Job controller is slow)
    r.deliver()
    r.step(3)
    assert not (_adopted(r).get("status") or {}).get("placement"), "no placement before every pod exists"
    assert all(p["spec"].get("schedulingGates") for p in r.api.objects["pods"].values())
    del last["metadata"]["resourceVersion"]
    last["metadata"]["uid"] = uuid.uuid4().hex
    r.api._store("pods", last, "ADDED")
    r.deliver()
    r.step(2)
    assert _adopted(r)["status"]["placement"]["ranks"]


def test_adopted_gangs_and_trainingjobs_never_share_a_gpu():
    r = rig(nodes=5, tors=1)
    r.submit(make_job("own", 2))
    _jobset(r, "theirs", jobs=1, parallelism=2)
    r.step(4)
    r.submit(make_job("late", 2))  # one node left: it waits, whoever holds the other four
    r.step(2)
    placed = [rk for j in r.api.objects["trainingjobs"].values()
              for rk in ((j.get("status") or {}).get("placement") or {}).get("ranks") or []]
    slots = [(rk["node"], g) for rk in placed for g in rk["gpus"]]
    assert len(slots) == len(set(slots)), "a GPU in two placements"
    assert len(placed) == 4 and r.reason("late") in ("Unschedulable", "Reserving")


def test_an_adopted_gang_is_preempted_through_its_owner_and_comes_back_when_its_pods_do():
    """A higher-priority TrainingJob needs the nodes: the adopted gang's pods are deleted (its owner makes them
    again, gated), it is requeued, never failed; Railyard created none of its pods."""
    r = rig(nodes=2, tors=1)
    for name, value in (("low", 10), ("high", 1000)):
        r.api._store("priorityclasses", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                         "metadata": {"name": name}, "value": value}, "ADDED")
    r.deliver()
    names = _jobset(r, "theirs", jobs=1, parallelism=2)
    for pod in names:
        r.api.objects["pods"][("default", pod)]["spec"]["priorityClassName"] = "low"
    r.step(3)
    r.api.bind_released()
    r.deliver()
    r.step()
    adopted = _adopted(r)["metadata"]["name"]
    assert r.reason(adopted, cond.RUNNING) == "AllRunning"
    urgent = make_job("urgent", 2)
    urgent["spec"]["priorityClassName"] = "high"
    r.submit(urgent)
    r.step(2)  # victims marked, then (nobody reports) requeued: the owner's pods deleted
    status = _adopted(r)["status"]
    assert cond.get(status["conditions"], "Preempted")["status"] == "True" and not status.get("placement")
    assert not cond.is_true(status["conditions"], cond.FAILED)
    assert all(("default", n) not in r.api.objects["pods"] for n in names), "its pods deleted (the owner re-makes)"
    r.step()
    assert r.status("urgent").get("placement"), "the preemptor got the room"


def _remake(r: Rig, name: str, passes_between: int = 0) -> str:
    """The pod's Job makes it again (a new name) after `passes_between` passes of the operator; the old one is
    gone. Returns the new pod's name."""
    old = r.api.objects["pods"][("default", name)]
    r.api._remove("pods", ("default", name))
    r.deliver()
    r.step(passes_between)
    fresh = f"{name.rsplit('-', 1)[0]}-{uuid.uuid4().hex[:5]}"
    r.api._store("pods", _fresh(old, fresh), "ADDED")
    r.deliver()
    return fresh


def _placed_and_bound(r: Rig) -> None:
    """Passes to place and release a gang, kube-scheduler binding it, passes to see it run."""
    r.step(3)
    r.api.bind_released()
    r.deliver()
    r.step(2)


def _running_jobset(r: Rig, name: str, jobs: int, parallelism: int) -> list[str]:
    names = _jobset(r, name, jobs=jobs, parallelism=parallelism)
    r.step(3)
    r.api.bind_released()
    r.deliver()
    r.step()
    assert r.reason(_adopted(r)["metadata"]["name"], cond.RUNNING) == "AllRunning"
    return names


def test_a_pod_its_owner_makes_again_is_placed_alone_next_to_the_survivors_which_are_not_touched():
    r = rig(nodes=6, tors=2)
    names = _running_jobset(r, "train", jobs=2, parallelism=2)
    before = {rk["rank"]: rk for rk in _adopted(r)["status"]["placement"]["ranks"]}
    writes = len(r.api.writes)
    fresh = _remake(r, names[1], passes_between=2)  # the operator sees the gang short of a pod meanwhile
    r.step(2)
    status = _adopted(r)["status"]
    after = {rk["rank"]: rk for rk in status["placement"]["ranks"]}
    assert after[1]["pod"] == fresh
    assert after[1]["podUid"] == r.api.objects["pods"][("default", fresh)]["metadata"]["uid"]
    assert after[1]["node"] == before[1]["node"], "its old node is free again: the nearest home"
    assert {k: (v["pod"], v["node"], v["gpus"]) for k, v in after.items() if k != 1} == \
        {k: (v["pod"], v["node"], v["gpus"]) for k, v in before.items() if k != 1}, "the survivors keep everything"
    touched = {w[1] for w in r.api.writes[writes:] if w[0] in ("PATCH", "DELETE", "POST") and w[1].startswith("pods")}
    assert touched == {f"pods/{fresh}"}, touched
    pod = r.api.objects["pods"][("default", fresh)]
    assert pinned_node(pod["spec"]) == after[1]["node"] and not pod["spec"].get("schedulingGates")
    assert status["restartCount"] == 1 and status["lastRestart"]["reason"] == "PodDeleted"
    assert cond.get(status["conditions"], cond.PLACED)["reason"] == "Released"
    r.api.bind_released()
    r.deliver()
    r.step()
    assert r.reason(_adopted(r)["metadata"]["name"], cond.RUNNING) == "AllRunning"
    slots = [(rk["node"], g) for rk in _adopted(r)["status"]["placement"]["ranks"] for g in rk["gpus"]]
    assert len(slots) == len(set(slots))


def test_a_pod_re_made_after_its_node_is_lost_lands_in_the_survivors_tor_and_never_on_the_lost_node():
    r = rig(nodes=6, tors=2)
    names = _running_jobset(r, "train", jobs=1, parallelism=2)
    before = {rk["rank"]: rk for rk in _adopted(r)["status"]["placement"]["ranks"]}
    lost = before[0]["node"]
    r.api._remove("nodes", ("", lost))
    r.deliver()
    fresh = _remake(r, names[0])
    r.step(2)
    after = {rk["rank"]: rk for rk in _adopted(r)["status"]["placement"]["ranks"]}
    assert after[0]["pod"] == fresh and after[0]["node"] != lost
    tor = r.state.nodes[before[1]["node"]].domain(1) if before[1]["node"] in r.state.nodes else None
    assert tor is None or r.state.nodes[after[0]["node"]].domain(1) == tor, "next to the survivor"
    assert after[1] == before[1]


def test_until_the_owner_makes_the_pod_again_the_gang_waits_and_when_every_pod_is_gone_it_gives_its_nodes_back():
    r = rig(nodes=4, tors=1, release_record_seconds=10.0)  # the operator's default: the release recorded later
    names = _running_jobset(r, "train", jobs=1, parallelism=2)
    bodies = {n: r.api.objects["pods"][("default", n)] for n in names}
    r.api._remove("pods", ("default", names[0]))
    r.deliver()
    r.step(2)
    status = _adopted(r)["status"]
    assert status["placement"]["ranks"] and status.get("restartCount", 0) == 0, "waits for its owner"
    r.api._remove("pods", ("default", names[1]))
    r.deliver()
    r.step()
    status = _adopted(r)["status"]
    assert not status.get("placement") and not cond.is_true(status["conditions"], cond.FAILED)
    assert not r.state.snapshot().used, "it holds nothing while its owner has no pod for it"
    # Its owner makes them again (an LWS group re-created whole): placed anew, released, running.
    for name in names:  # the same names, as a StatefulSet makes them
        r.api._store("pods", _fresh(bodies[name], name), "ADDED")
    r.deliver()
    _placed_and_bound(r)
    status = _adopted(r)["status"]
    assert cond.get(status["conditions"], cond.PLACED)["reason"] == "Released"
    assert cond.is_true(status["conditions"], cond.RUNNING)
    assert {rk["pod"] for rk in status["placement"]["ranks"]} == set(names)


def test_a_group_re_made_one_pod_at_a_time_ends_placed_and_released_every_rank_its_new_pod():
    """An LWS group re-created whole, seen in the order it happens: the new leader exists before the old worker
    goes. It is placed next to the worker as a replacement; the worker then goes and comes back, and the gang
    ends placed and released with every rank its new pod, no GPU twice."""
    r = rig(nodes=4, tors=1)
    names = _running_jobset(r, "train", jobs=1, parallelism=2)
    bodies = {n: r.api.objects["pods"][("default", n)] for n in names}
    r.api._remove("pods", ("default", names[0]))
    r.api._store("pods", _fresh(bodies[names[0]], names[0]), "ADDED")
    r.deliver()
    r.step(2)
    assert _adopted(r)["status"]["restartCount"] == 1, "the new leader placed next to the surviving worker"
    r.api._remove("pods", ("default", names[1]))
    r.deliver()
    r.step()
    r.api._store("pods", _fresh(bodies[names[1]], names[1]), "ADDED")
    r.deliver()
    _placed_and_bound(r)
    status = _adopted(r)["status"]
    pods = {n: r.api.objects["pods"][("default", n)] for n in names}
    assert {rk["podUid"] for rk in status["placement"]["ranks"]} == {p["metadata"]["uid"] for p in pods.values()}
    assert cond.get(status["conditions"], cond.PLACED)["reason"] == "Released"
    assert cond.is_true(status["conditions"], cond.RUNNING)
    assert all(pinned_node(p["spec"]) and not p["spec"].get("schedulingGates") for p in pods.values())
    slots = [(rk["node"], g) for rk in status["placement"]["ranks"] for g in rk["gpus"]]
    assert len(slots) == len(set(slots)) and len(r.state.snapshot().used) <= 2


def test_a_leader_killed_between_recording_the_new_home_and_pinning_it_is_finished_by_the_successor(monkeypatch):
    from railyard.operator.act.loop import PlacementLoop
    from railyard.operator.cache.state import ClusterState

    from tests.support.settings import settings as operator_settings

    r = rig(nodes=6, tors=2)
    names = _running_jobset(r, "train", jobs=1, parallelism=2)
    fresh = _remake(r, names[1])
    monkeypatch.setattr(r.loop.replaced.materialiser, "enqueue", lambda *a, **k: None)  # killed after the write
    r.step()
    recorded = {rk["rank"]: rk for rk in _adopted(r)["status"]["placement"]["ranks"]}
    assert recorded[1]["pod"] == fresh and r.api.objects["pods"][("default", fresh)]["spec"].get("schedulingGates")
    state = ClusterState(clock=r.clock)
    for kind in state.kinds:
        items, rv = r.api.listing(kind)
        state.replace(kind, items, rv)
    r.api.log.clear()
    successor = Rig(r.api, state, PlacementLoop(state, r.api, operator_settings(
        loss_debounce_seconds=0, not_ready_debounce_seconds=0, metrics_publish_seconds=0.0), lambda: True), r.clock)
    successor.step(2)
    pod = r.api.objects["pods"][("default", fresh)]
    assert pinned_node(pod["spec"]) == recorded[1]["node"] and not pod["spec"].get("schedulingGates")
    assert _adopted(r)["status"]["restartCount"] == 1, "finished, not a second restart"
    assert cond.get(_adopted(r)["status"]["conditions"], cond.PLACED)["reason"] == "Released"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(("trainingjob", "jobset", "remake", "bind", "finish")), st.integers(1, 3),
                          st.integers(0, 50)), min_size=1, max_size=10))
def test_adopted_gangs_and_trainingjobs_never_share_a_gpu_whatever_their_owners_do(steps):
    """Property: TrainingJobs and adopted gangs arriving, their pods re-made by their owners, bound, finished, in
    any order: no GPU is ever in two live placements, and no two live pods name the same GPU."""
    r = rig(nodes=3, tors=2)
    for i, (what, size, pick) in enumerate(steps):
        adopted = sorted(n for (_, n), p in r.api.objects["pods"].items()
                         if "jobset.sigs.k8s.io/jobset-name" in p["metadata"]["labels"])
        if what == "trainingjob":
            r.submit(make_job(f"own{i}", size))
        elif what == "jobset":
            _jobset(r, f"theirs{i}", jobs=1, parallelism=size)
        elif what == "remake" and adopted:
            _remake(r, adopted[pick % len(adopted)])
        elif what == "bind":
            r.api.bind_released()
            r.deliver()
        elif what == "finish" and adopted:
            r.api._remove("pods", ("default", adopted[pick % len(adopted)]))
            r.deliver()
        r.step()
        live = [j for j in r.api.objects["trainingjobs"].values()
                if not cond.is_true((j.get("status") or {}).get("conditions") or [], cond.FAILED)]
        slots = [(rk["node"], g) for j in live
                 for rk in ((j.get("status") or {}).get("placement") or {}).get("ranks") or [] for g in rk["gpus"]]
        assert len(slots) == len(set(slots)), "a GPU in two placements"
        named = [(pinned_node(p["spec"]), g) for p in r.api.objects["pods"].values()
                 if (p["metadata"].get("annotations") or {}).get("railyard.dev/gpus") and pinned_node(p["spec"])
                 for g in p["metadata"]["annotations"]["railyard.dev/gpus"].split(",")]
        assert len(named) == len(set(named)), "two live pods name one GPU"


def test_a_node_lost_under_an_adopted_gang_is_quarantined_when_its_pod_is_re_made_elsewhere():
    from tests.support.nodes import not_ready

    r = rig(nodes=6, tors=2)
    names = _running_jobset(r, "train", jobs=1, parallelism=2)
    before = {rk["rank"]: rk for rk in _adopted(r)["status"]["placement"]["ranks"]}
    lost = before[0]["node"]
    not_ready(r.api, r.state, lost)  # dark for an hour: the kubelet's pods get evicted, the Job makes it again
    r.step()
    fresh = _remake(r, names[0])
    r.step(2)
    status = _adopted(r)["status"]
    after = {rk["rank"]: rk for rk in status["placement"]["ranks"]}
    assert after[0]["pod"] == fresh and after[0]["node"] != lost and after[1] == before[1]
    assert status["lastRestart"]["reason"] == "NodeNotReady" and status["lastRestart"]["lostNodes"] == [lost]
    assert {"key": "railyard.dev/unhealthy", "value": "NodeNotReady", "effect": "NoSchedule"} in r.taints(lost)
    assert any(e["reason"] == "NodeLost" for e in r.api.posted_events)


def test_a_gangs_trainingjob_deleted_by_hand_while_its_pods_run_is_made_again_with_its_placement():
    """A tenant's `kubectl delete tj` of an adopted gang deletes no pod (the pods are their owner's): the
    TrainingJob is made again and the placement read back from the pods, by whichever operator leads, so the
    running pods' GPUs stay counted and a pod their owner makes again later is placed next to them."""
    r = rig(nodes=4, tors=1)
    names = _running_jobset(r, "train", jobs=1, parallelism=2)
    before = _adopted(r)
    r.api.delete_job("default", before["metadata"]["name"])
    r.deliver()
    assert all(("default", n) in r.api.objects["pods"] for n in names), "the owner's pods are not touched"
    r.loop = type(r.loop)(r.state, r.api, r.loop.ctx.settings, lambda: True, clock=r.clock)  # even a new leader
    r.step(2)
    after = _adopted(r)
    assert after["metadata"]["uid"] != before["metadata"]["uid"], "made again"

    def where(body: dict[str, Any]) -> tuple:
        placement = body["status"]["placement"]
        return placement["id"], [(x["rank"], x["pod"], x["podUid"], x["node"], x["gpus"]) for x in placement["ranks"]]

    assert where(after) == where(before), "the placement its pods run under, read back from them"
    assert after["metadata"]["ownerReferences"] == before["metadata"]["ownerReferences"]
    assert any(e["reason"] == "PlacementRestored" for e in r.api.posted_events)
    fresh = _remake(r, names[1])
    r.step(2)
    ranks = {rk["rank"]: rk for rk in _adopted(r)["status"]["placement"]["ranks"]}
    assert ranks[1]["pod"] == fresh and ranks[0] == {k: v for k, v in before["status"]["placement"]["ranks"][0].items()}
    slots = [(rk["node"], g) for rk in ranks.values() for g in rk["gpus"]]
    assert len(slots) == len(set(slots))


def test_a_pytorchjobs_pods_are_one_gang_the_master_rank_0_and_the_workers_after_it_by_replica_index():
    """Kubeflow Training Operator v1's PyTorchJob: its pods carry their replica type and index, its spec says
    how many; torchrun's ranks are the master's 0 and the workers' 1.. in replica-index order."""
    r = rig(nodes=4, tors=1)
    uid = uuid.uuid4().hex
    r.api.owners["/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/bert"] = {
        "metadata": {"name": "bert", "uid": uid},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}}}
    for kind, index in (("worker", 1), ("master", 0), ("worker", 0)):  # in any order
        labels = {"training.kubeflow.org/job-name": "bert", "training.kubeflow.org/replica-type": kind,
                  "training.kubeflow.org/replica-index": str(index), "railyard.dev/scheduling": "gang"}
        r.api._store("pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"bert-{kind}-{index}", "namespace": "default", "labels": labels, "annotations": {},
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert",
                                              "uid": uid, "controller": True}]},
            "spec": {"restartPolicy": "OnFailure", "schedulingGates": [{"name": "railyard.dev/gang"}],
                     "containers": [{"name": "pytorch", "image": "trainer:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Pending"}}, "ADDED")
    r.deliver()
    r.step(3)
    job = _adopted(r)
    assert job["spec"]["replicas"] == 3 and job["spec"]["adopt"]["kind"] == "PyTorchJob"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    ranks = {rk["rank"]: rk["pod"] for rk in job["status"]["placement"]["ranks"]}
    assert ranks == {0: "bert-master-0", 1: "bert-worker-0", 2: "bert-worker-1"}
    assert cond.get(job["status"]["conditions"], cond.PLACED)["reason"] in ("Placing", "Released")


def test_a_pods_own_node_affinity_is_kept_when_railyard_pins_it_without_reading_it_again():
    r = rig(nodes=4, tors=1)
    names = _jobset(r, "train", jobs=1, parallelism=2)
    pod = r.api.objects["pods"][("default", names[0])]
    own = {"matchExpressions": [{"key": LABEL_TOR, "operator": "Exists"}]}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [own]}}}
    r.api._store("pods", pod, "MODIFIED")
    r.deliver()
    reads = len([w for w in r.api.writes if w[0] == "GET"])
    r.step(3)
    pinned = r.api.objects["pods"][("default", names[0])]["spec"]["affinity"]["nodeAffinity"]
    terms = pinned["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 1 and terms[0]["matchExpressions"] == own["matchExpressions"], "its own term kept"
    assert terms[0]["matchFields"][0]["key"] == "metadata.name", "and narrowed to Railyard's node"
    assert len([w for w in r.api.writes if w[0] == "GET"]) == reads


@given(st.sampled_from([
    {},
    {"affinity": {"podAntiAffinity": {"x": 1}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "spec.x", "operator": "Exists"}]}]}}}},
    {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}]}]}}}},
]), st.sampled_from(["gpu-0000", "n-7"]))
def test_a_pin_taken_off_a_pods_spec_gives_back_the_spec_its_owner_wrote(spec, node):
    import copy

    from railyard.operator.decide.adoption import unpinned
    from railyard.operator.decide.builders import pin_to

    pinned = copy.deepcopy(spec)
    pin_to(pinned, node)
    assert pinned_node(pinned) == node
    assert unpinned(copy.deepcopy(pinned)) == spec


def test_a_gang_whose_placement_was_given_back_is_not_restored_while_its_pods_still_run():
    """Preemption writes the placement away before it deletes the pods: until they go, they run released under a
    placement no TrainingJob records — that is not a TrainingJob made again, so nothing is restored."""
    r = rig(nodes=4, tors=1)
    _running_jobset(r, "train", jobs=1, parallelism=2)
    body = _adopted(r)
    body["status"]["placement"] = None
    r.api._store("trainingjobs", body, "MODIFIED")
    r.deliver()
    r.step(2)
    assert not _adopted(r)["status"].get("placement")
    assert not any(e["reason"] == "PlacementRestored" for e in r.api.posted_events)


def test_no_trainingjob_is_made_again_for_a_workload_being_deleted():
    """The garbage collector may take the gang's TrainingJob before its pods: with the JobSet gone, Railyard does
    not make the TrainingJob again from the pods still running."""
    r = rig(nodes=4, tors=1)
    _running_jobset(r, "train", jobs=1, parallelism=2)
    r.api.owners.clear()  # the JobSet is gone
    r.api.delete_job("default", _adopted(r)["metadata"]["name"])
    r.deliver()
    r.step(2)
    assert not [j for j in r.api.objects["trainingjobs"].values() if j["spec"].get("adopt")]
