"""Crash safety and leader election: real operator processes killed at the worst moments."""

from __future__ import annotations

import pytest
from railyard.topology.cluster.nodes import pinned_node

from tests.e2e.test_operator import assert_no_gpu_double_booked
from tests.support.faults import FAULT, bound_generation, ranks_of, untaint
from tests.support.jobs import create_job, get_job, make_job, pods_of, wait_bound, wait_condition
from tests.support.operator import OperatorProcess, wait_for_leader
from tests.support.poll import poll

pytestmark = pytest.mark.e2e


def crash_after_creating_pods(identity, coordination, custom, namespace, lease_namespace, tmp_path, job) -> None:
    """Run an operator that exits right after creating a gang's pods, before releasing them."""
    doomed = OperatorProcess(identity, lease_namespace, tmp_path, crash_after="pods-created", name="doomed")
    try:
        wait_for_leader(coordination, lease_namespace)
        create_job(custom, namespace, job)
        poll(lambda: doomed.proc.poll() is not None, 60, "the operator to crash after creating pods")
        assert doomed.proc.returncode == 17, doomed.log_tail()
    finally:
        doomed.stop()


def test_operator_killed_between_pod_creation_and_release_leaves_no_partial_gang(
        identity, crds, api_client, core, custom, coordination, namespace, lease_namespace, tmp_path):
    crash_after_creating_pods(identity, coordination, custom, namespace, lease_namespace, tmp_path,
                              make_job("survivor", 6))
    pods = pods_of(api_client, core, namespace, "survivor")
    assert len(pods) == 6, "the crash point is after all pods were created"
    assert all(p["spec"].get("schedulingGates") for p in pods), "no pod may be released before the crash"
    assert not any(p["spec"].get("nodeName") for p in pods), "gated pods are never bound"

    successor = OperatorProcess(identity, lease_namespace, tmp_path, name="successor")
    try:
        bound = wait_bound(api_client, core, namespace, "survivor", 6, timeout=90)
        assert all(not p["spec"].get("schedulingGates") for p in bound)
        job = wait_condition(custom, namespace, "survivor", "Placed", reason="Released")
        recorded = {r["pod"]: r["node"] for r in job["status"]["placement"]["ranks"]}
        # The successor finished the recorded placement; it did not invent a new one.
        assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound} == recorded
    finally:
        successor.stop()


def test_two_operators_never_place_the_same_gpu_twice(
        identity, crds, api_client, core, custom, coordination, namespace, lease_namespace, tmp_path):
    operators = [OperatorProcess(identity, lease_namespace, tmp_path, name=f"ha{i}") for i in range(2)]
    try:
        wait_for_leader(coordination, lease_namespace)
        shapes = [(1, 8), (2, 4), (1, 2), (2, 8)]
        names = []
        for i in range(50):
            replicas, gpus = shapes[i % len(shapes)]
            names.append((f"burst-{i}", replicas))
            create_job(custom, namespace, make_job(f"burst-{i}", replicas, gpus=gpus))
        # Fail over in the middle of the burst: kill the leader hard (no lease release).
        holder = coordination.read_namespaced_lease("railyard-operator", lease_namespace).spec.holder_identity
        poll(lambda: sum(1 for n, _ in names if (get_job(custom, namespace, n).get("status") or {})
                         .get("placement")) >= 10, 60, "ten jobs placed")
        # Each process logs its identity at start; the lease names the leader's.
        leader = next(o for o in operators if f"started as {holder}" in o.log_path.read_text(errors="replace"))
        leader.stop(kill=True)
        for name, replicas in names:
            wait_bound(api_client, core, namespace, name, replicas, timeout=120)
        assert_no_gpu_double_booked(api_client, core)
        for name, _ in names:
            placement = get_job(custom, namespace, name)["status"]["placement"]
            pods = {p["metadata"]["name"]: p for p in pods_of(api_client, core, namespace, name)}
            assert {r["pod"] for r in placement["ranks"]} == set(pods), f"{name}: pods and placement disagree"
    finally:
        for o in operators:
            o.stop()


def test_gang_that_cannot_be_bound_is_replanned(
        identity, crds, api_client, core, custom, coordination, namespace, lease_namespace, tmp_path):
    # Stop an operator between pod creation and release, let a foreign pod take the GPUs of rank 0's
    # node behind Railyard's back (as another scheduler would), then let a new operator release.
    crash_after_creating_pods(identity, coordination, custom, namespace, lease_namespace, tmp_path,
                              make_job("contested", 4))
    first = {p["metadata"]["name"]: pinned_node(p["spec"])
             for p in pods_of(api_client, core, namespace, "contested")}
    taken = first["contested-0"]
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "squatter"},
        "spec": {"nodeName": taken, "containers": [{"name": "c", "image": "registry.invalid/x:0",
                                                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
    successor = OperatorProcess(identity, lease_namespace, tmp_path, name="successor",
                                extra_env={"RAILYARD_BIND_TIMEOUT_SECONDS": "5"})
    try:
        def replanned() -> list[dict] | None:
            pods = pods_of(api_client, core, namespace, "contested")
            ok = len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)
            return pods if ok else None

        pods = poll(replanned, 120, "the gang re-planned and bound")
        assert taken not in {p["spec"]["nodeName"] for p in pods}
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=contested").items
        assert any(e.reason == "BindTimeout" for e in events), [e.reason for e in events]
        assert_no_gpu_double_booked(api_client, core)
    finally:
        successor.stop()


def test_an_operator_killed_right_after_recording_a_restart_is_completed_by_its_successor(
        identity, crds, api_client, core, custom, coordination, namespace, lease_namespace, tmp_path):
    # In this module, not test_faults.py: there the module's own operator would take the restart first.
    doomed = OperatorProcess(identity, lease_namespace, tmp_path, crash_after="restart-recorded", name="doomed")
    victim = None
    try:
        wait_for_leader(coordination, lease_namespace)
        create_job(custom, namespace, make_job("phoenix", 4))
        before = ranks_of(wait_bound(api_client, core, namespace, "phoenix", 4))
        victim = before["1"]
        core.patch_node(victim, {"spec": {"taints": [FAULT]}})
        poll(lambda: doomed.proc.poll() is not None, 60, "the operator to crash after recording the restart")
        assert doomed.proc.returncode == 17, doomed.log_tail()
        doomed.stop()
        job = get_job(custom, namespace, "phoenix")
        assert job["status"]["restartCount"] == 1 and not [
            p for p in pods_of(api_client, core, namespace, "phoenix") if ".p1-" in p["metadata"]["name"]]
        successor = OperatorProcess(identity, lease_namespace, tmp_path, name="successor")
        try:
            after = ranks_of(bound_generation(api_client, core, namespace, "phoenix", 4))
            job = wait_condition(custom, namespace, "phoenix", "Placed", reason="Released", timeout=60)
            assert job["status"]["restartCount"] == 1, "the recorded restart was finished, not decided again"
            assert after["1"] != victim and all(after[r] == before[r] for r in ("0", "2", "3"))
            recorded = {str(r["rank"]): r["node"] for r in job["status"]["placement"]["ranks"]}
            assert after == recorded
            poll(lambda: not [p for p in pods_of(api_client, core, namespace, "phoenix")
                              if ".p1-" not in p["metadata"]["name"]], 60, "generation 0 gone")
            assert_no_gpu_double_booked(api_client, core)
        finally:
            successor.stop()
    finally:
        doomed.stop()
        if victim:
            untaint(core, victim, FAULT["key"])
