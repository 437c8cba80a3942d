"""Node loss under a Running gang: the lost nodes' ranks are replaced next to where they were, every
healthy rank keeps its node, and the whole gang restarts as generation 1. Nodes are lost the way
the rig documents: removing the `type=kwok` label stops their heartbeat."""

from __future__ import annotations

import contextlib
import os
from collections import Counter

import pytest
from kubernetes import client

from tests.e2e.test_operator import assert_no_gpu_double_booked
from tests.support.faults import FAULT, bound_generation, ranks_of, untaint
from tests.support.jobs import create_job, get_job, gpus_of, make_job, pods_of, wait_bound, wait_condition
from tests.support.poll import poll
from tests.support.rig import load_hack_module

pytestmark = pytest.mark.e2e
TOR = "topology.railyard.dev/tor"


def set_kwok_label(core, node: str, present: bool) -> None:
    core.patch_node(node, {"metadata": {"labels": {"type": "kwok" if present else None}}})


def lift_quarantine(core, node: str) -> None:
    """What an admin does: `kubectl taint node NODE railyard.dev/unhealthy-`."""
    taints = [t for t in core.read_node(node).spec.taints or [] if t.key != "railyard.dev/unhealthy"]
    core.patch_node(node, {"spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect}
                                               for t in taints] or None}})


def free_whole_nodes(api_client, core, tor: str, exclude: set[str]) -> list[str]:
    nodes = [n for n in core.list_node().items if (n.metadata.labels or {}).get(TOR) == tor
             and n.metadata.name not in exclude and not n.spec.unschedulable
             and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])]
    pods = api_client.sanitize_for_serialization(core.list_pod_for_all_namespaces().items)
    held = Counter(p["spec"].get("nodeName") for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")
                   and "railyard.dev/gpus" in (p["metadata"].get("annotations") or {}))
    return [n.metadata.name for n in nodes if not held[n.metadata.name]]


def test_lost_nodes_are_replaced_next_to_them_and_the_gang_restarts(operator, api_client, core, custom, namespace):
    if not any((n.metadata.labels or {}).get("type") == "kwok" for n in core.list_node().items):
        pytest.skip("needs kwok nodes to stop a node's heartbeat")
    create_job(custom, namespace, make_job("resilient", 12, faultPolicy={"nodeLossGraceSeconds": 0}))
    before = {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"]
              for p in wait_bound(api_client, core, namespace, "resilient", 12)}
    wait_condition(custom, namespace, "resilient", "Running", timeout=60)
    labels = {n.metadata.name: n.metadata.labels or {} for n in core.list_node().items}
    by_tor: dict[str, list[str]] = {}
    for node in sorted(set(before.values())):
        by_tor.setdefault(labels[node][TOR], []).append(node)
    lost = {nodes[0] for nodes in list(by_tor.values())[:2]}  # one node from each of (up to) two TORs
    if len(lost) < 2:
        lost.add(sorted(set(before.values()) - lost)[0])
    try:
        for node in lost:
            set_kwok_label(core, node, False)
        job = poll(lambda: (j := get_job(custom, namespace, "resilient"))["status"].get("restartCount") == 1 and j,
                   120, "the gang restarted as generation 1")
        restart = job["status"]["lastRestart"]
        assert sorted(restart["lostNodes"]) == sorted(lost) and restart["movedRanks"] == 0
        assert {u["name"] for u in job["status"]["unhealthyNodes"]} == lost
        wait_condition(custom, namespace, "resilient", "Placed", reason="Released", timeout=90)
        pods = poll(lambda: (ps := [p for p in pods_of(api_client, core, namespace, "resilient")
                                    if p["metadata"]["name"].startswith("resilient.p1-") and p["spec"].get("nodeName")])
                    and len(ps) == 12 and ps, 90, "12 bound pods of generation 1")
        after = {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"] for p in pods}
        for rank, node in before.items():
            if node in lost:
                assert after[rank] not in lost and after[rank] not in set(before.values()) - lost
            else:
                assert after[rank] == node, f"healthy rank {rank} moved from {node} to {after[rank]}"
        for r in restart["replacements"]:
            tor = labels[r["lost"]][TOR]
            if not r["sameTor"]:  # only when the lost node's TOR had no free node left
                assert not free_whole_nodes(api_client, core, tor, lost | set(after.values())), r
        for pod in pods:
            env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}
            assert env["RAILYARD_RESTART_COUNT"] == "1" and env["TORCHELASTIC_RESTART_COUNT"] == "1"
            assert pod["spec"]["hostname"] == f"resilient-{pod['metadata']['labels']['railyard.dev/rank']}"
            assert len(gpus_of(pod)) == 8
        poll(lambda: not [p for p in pods_of(api_client, core, namespace, "resilient")
                          if not p["metadata"]["name"].startswith("resilient.p1-")], 90,
             "generation 0 gone (on the dark nodes: force-deleted once NotReady for RAILYARD_FORCE_DELETE_SECONDS)")
        assert_no_gpu_double_booked(api_client, core)
        events = {e.reason for e in core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=resilient").items}
        assert {"NodeLost", "ReplacementChosen", "RestartIssued"} <= events, events
        for node in lost:  # quarantined: no job may land there until an admin lifts the taint
            assert any(t.key == "railyard.dev/unhealthy" and t.effect == "NoSchedule"
                       for t in core.read_node(node).spec.taints or [])
    finally:
        for node in lost:
            set_kwok_label(core, node, True)
            lift_quarantine(core, node)
        poll(lambda: all(any(c.type == "Ready" and c.status == "True" for c in core.read_node(n).status.conditions)
                         for n in lost), 90, "the lost nodes Ready again")


@pytest.mark.parametrize("signal", ["untolerated NoExecute taint", "node deleted"])
def test_other_loss_signals_restart_the_gang_around_the_lost_node(
        signal, operator, api_client, core, custom, namespace):
    if signal == "node deleted" and not os.environ.get("RAILYARD_LOCAL_RIG"):
        pytest.skip("deletes a node: only on the local rig, which can re-create it from its profile")
    create_job(custom, namespace, make_job("sturdy", 4))
    before = {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"]
              for p in wait_bound(api_client, core, namespace, "sturdy", 4)}
    victim = before["1"]
    fault = {"key": "nvidia.com/gpu-xid-error", "value": "79", "effect": "NoExecute"}
    try:
        if signal == "node deleted":
            core.delete_node(victim)
        else:
            core.patch_node(victim, {"spec": {"taints": [fault]}})
        job = poll(lambda: (j := get_job(custom, namespace, "sturdy"))["status"].get("restartCount") == 1 and j,
                   60, f"a restart after {signal}")
        expected = {"node deleted": "NodeDeleted", "untolerated NoExecute taint": "Taint"}[signal]
        assert job["status"]["lastRestart"]["reason"] == expected
        assert job["status"]["lastRestart"]["lostNodes"] == [victim]
        pods = poll(lambda: (ps := [p for p in pods_of(api_client, core, namespace, "sturdy")
                                    if p["metadata"]["name"].startswith("sturdy.p1-") and p["spec"].get("nodeName")])
                    and len(ps) == 4 and ps, 90, "4 bound pods of generation 1")
        after = {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"] for p in pods}
        assert after["1"] != victim and all(after[r] == before[r] for r in before if r != "1")
        assert_no_gpu_double_booked(api_client, core)
    finally:
        if signal == "node deleted":
            rig = load_hack_module("cluster", "cluster.py")
            missing = [n for n in rig.load_profile_nodes("small") if n["metadata"]["name"] == victim]
            with contextlib.suppress(client.ApiException):
                core.create_node(missing[0])
            poll(lambda: any(c.type == "Ready" and c.status == "True"
                             for c in core.read_node(victim).status.conditions or []), 90, f"{victim} back")
        with contextlib.suppress(client.ApiException):
            lift_quarantine(core, victim)
            core.patch_node(victim, {"spec": {"taints": [t for t in [
                {"key": t.key, "value": t.value, "effect": t.effect} for t in core.read_node(victim).spec.taints or []]
                if t["key"] != fault["key"]] or None}})


def test_eight_nodes_lost_at_once_make_one_restart(operator, api_client, core, custom, namespace):
    create_job(custom, namespace, make_job("wide", 12))
    before = ranks_of(wait_bound(api_client, core, namespace, "wide", 12))
    victims = sorted(set(before.values()))[:8]
    try:
        for node in victims:  # a leaf switch going down: eight nodes within a second
            core.patch_node(node, {"spec": {"taints": [FAULT]}})
        after = ranks_of(bound_generation(api_client, core, namespace, "wide", 12))
        job = get_job(custom, namespace, "wide")
        assert job["status"]["restartCount"] == 1, "losses inside the debounce window make one restart"
        assert sorted(job["status"]["lastRestart"]["lostNodes"]) == victims
        assert len(job["status"]["lastRestart"]["replacements"]) == 8
        for rank, node in before.items():
            assert (after[rank] not in victims) if node in victims else (after[rank] == node), rank
        assert_no_gpu_double_booked(api_client, core)
    finally:
        for node in victims:
            untaint(core, node, FAULT["key"])


def test_a_gpu_dropping_out_of_allocatable_restarts_the_gang_around_its_node(
        operator, api_client, core, custom, namespace):
    create_job(custom, namespace, make_job("xid", 3))
    before = ranks_of(wait_bound(api_client, core, namespace, "xid", 3))
    victim = before["2"]
    try:
        # The device plugin withdraws a GPU after a fatal XID: allocatable 8 -> 7.
        core.patch_node_status(victim, {"status": {"allocatable": {"nvidia.com/gpu": "7"}}})
        job = poll(lambda: (j := get_job(custom, namespace, "xid"))["status"].get("restartCount") == 1 and j,
                   60, "a restart after the allocatable drop")
        assert job["status"]["lastRestart"]["reason"] == "GpuAllocatableDropped"
        after = ranks_of(bound_generation(api_client, core, namespace, "xid", 3))
        assert after["2"] != victim and after["0"] == before["0"] and after["1"] == before["1"]
    finally:
        core.patch_node_status(victim, {"status": {"allocatable": {"nvidia.com/gpu": "8"}}})
        untaint(core, victim, "none")


def test_an_evicted_pod_is_an_infrastructure_restart_on_the_same_nodes(operator, api_client, core, custom, namespace):
    create_job(custom, namespace, make_job("evicted", 2, faultPolicy={"maxRestarts": 0}))
    pods = wait_bound(api_client, core, namespace, "evicted", 2)
    before = ranks_of(pods)
    victim = next(p for p in pods if p["metadata"]["labels"]["railyard.dev/rank"] == "1")
    core.create_namespaced_pod_eviction(victim["metadata"]["name"], namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=victim["metadata"]["name"], namespace=namespace)))
    after = ranks_of(bound_generation(api_client, core, namespace, "evicted", 2))
    job = get_job(custom, namespace, "evicted")
    assert job["status"]["lastRestart"]["reason"] in ("PodDisrupted", "PodDeleted")
    assert not job["status"].get("processRestarts"), "an eviction is not the training process's failure"
    assert after == before, "nothing was wrong with the nodes: every rank stays"
    assert not any((c["type"], c["status"]) == ("Failed", "True") for c in job["status"]["conditions"])


def test_a_loss_without_a_replacement_inside_the_required_tor_requeues_the_whole_gang(
        operator, api_client, core, custom, namespace):
    # 8 whole-node replicas in one TOR of 8 nodes: a lost node leaves no free node inside the TOR.
    create_job(custom, namespace, make_job("boxed", 8, topology={"requiredTier": "tor"},
                                           faultPolicy={"replacementTimeoutSeconds": 0}))
    before = ranks_of(wait_bound(api_client, core, namespace, "boxed", 8))
    labels = {n.metadata.name: n.metadata.labels or {} for n in core.list_node().items}
    tor = {labels[n][TOR] for n in before.values()}.pop()
    victim = before["3"]
    try:
        core.patch_node(victim, {"spec": {"taints": [FAULT]}})
        after = ranks_of(bound_generation(api_client, core, namespace, "boxed", 8))
        job = get_job(custom, namespace, "boxed")
        assert job["status"]["lastRestart"]["reason"] == "Taint" and job["status"]["restartCount"] == 1
        assert victim not in after.values()
        assert len({labels[n][TOR] for n in after.values()}) == 1, "still inside one TOR"
        assert {labels[n][TOR] for n in after.values()} != {tor}, "a TOR with room for the whole gang"
        events = {e.reason for e in core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=boxed").items}
        assert "NoReplacement" in events, events
        job = wait_condition(custom, namespace, "boxed", "Placed", reason="Released", timeout=60)
        degraded = next(c for c in job["status"]["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "False" and degraded["reason"] == "Recovered"
        assert_no_gpu_double_booked(api_client, core)
    finally:
        untaint(core, victim, FAULT["key"])
