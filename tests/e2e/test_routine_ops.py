"""Routine operations of a shared GPU cluster on the real control plane: a typo in a template, a cordon,
a drain, a pod that takes its full grace period to exit, a ResourceQuota, half the gang's nodes going
dark together. Each is what a platform team does every day; none may cost a healthy gang its run."""

from __future__ import annotations

import contextlib
import subprocess

import pytest
from kubernetes import client

from tests.e2e.test_faults import set_kwok_label
from tests.support.jobs import create_job, delete_job, get_job, make_job, pods_of, wait_bound, wait_condition
from tests.support.poll import poll
from tests.support.rig import rig_binary

pytestmark = pytest.mark.e2e


def _kwok(core) -> bool:
    return any((n.metadata.labels or {}).get("type") == "kwok" for n in core.list_node().items)


def _restart_count(custom, namespace: str, name: str) -> int:
    return int((get_job(custom, namespace, name).get("status") or {}).get("restartCount") or 0)


def _quarantined(core, node: str) -> bool:
    return any(t.key == "railyard.dev/unhealthy" for t in core.read_node(node).spec.taints or [])


def test_malformed_templates_are_refused_by_name_and_never_stop_a_healthy_job(operator, api_client, core, custom,
                                                                              namespace):
    """The three templates that once halted every placement: the API server refuses them now, naming
    the field; what only the operator can judge ends in InvalidSpec; the healthy job is placed."""
    refused = {}
    for field, value in (("nodeSelector", ["gpu"]), ("tolerations", ["x"]), ("initContainers", "x"),
                         ("restartPolicy", "Always"), ("schedulingGates", [{"name": "mine"}])):
        body = make_job(f"typo-{field.lower()}", 2)
        body["spec"]["template"]["spec"][field] = value
        with pytest.raises(client.ApiException) as err:
            create_job(custom, namespace, body)
        refused[field] = err.value.body
    for field, body in refused.items():
        assert field in body, f"the API server's error names {field}: {body}"
    odd = make_job("odd-quantity", 2)
    odd["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "lots"}
    create_job(custom, namespace, odd)  # the schema takes any string; the operator judges the quantity
    create_job(custom, namespace, make_job("healthy", 2))
    wait_bound(api_client, core, namespace, "healthy", 2)
    job = wait_condition(custom, namespace, "odd-quantity", "Placed", "False", reason="InvalidSpec")
    message = next(c for c in job["status"]["conditions"] if c["type"] == "Placed")["message"]
    assert "cpu" in message and "lots" in message, message


def test_cordon_changes_nothing_for_a_running_gang_and_uncordon_leaves_no_quarantine(operator, api_client, core,
                                                                                     custom, namespace):
    create_job(custom, namespace, make_job("steady", 2))
    nodes = [p["spec"]["nodeName"] for p in wait_bound(api_client, core, namespace, "steady", 2)]
    wait_condition(custom, namespace, "steady", "Running", timeout=60)
    try:
        core.patch_node(nodes[0], {"spec": {"unschedulable": True}})  # kubectl cordon
        # Sync point: the operator has seen the cordon once a new job lands anywhere but there.
        create_job(custom, namespace, make_job("after-cordon", 1))
        placed = wait_bound(api_client, core, namespace, "after-cordon", 1)
        assert placed[0]["spec"]["nodeName"] != nodes[0]
        assert _restart_count(custom, namespace, "steady") == 0, "a cordon restarted the gang"
        assert {p["metadata"]["name"] for p in pods_of(api_client, core, namespace, "steady")} == {"steady-0",
                                                                                                  "steady-1"}
    finally:
        core.patch_node(nodes[0], {"spec": {"unschedulable": False}})  # kubectl uncordon
    assert not _quarantined(core, nodes[0]), "nothing to lift after an uncordon"


def test_kubectl_drain_moves_the_nodes_ranks_and_completes(operator, api_client, core, custom, namespace,
                                                            kubeconfig):
    create_job(custom, namespace, make_job("drained", 2))
    before = {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"]
              for p in wait_bound(api_client, core, namespace, "drained", 2)}
    wait_condition(custom, namespace, "drained", "Running", timeout=60)
    node = before["0"]
    try:
        run = subprocess.run([str(rig_binary("kubectl")), "--kubeconfig", kubeconfig, "drain", node,
                              "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s"],
                             capture_output=True, text=True, timeout=150)
        assert run.returncode == 0, run.stderr
        job = poll(lambda: (j := get_job(custom, namespace, "drained"))["status"].get("restartCount") == 1 and j,
                   60, "the gang restarted once")
        assert job["status"]["lastRestart"]["reason"] == "Drained"
        def attempt_bound() -> list[dict] | None:
            pods = [p for p in pods_of(api_client, core, namespace, "drained")
                    if p["metadata"]["name"].startswith("drained.p1-") and p["spec"].get("nodeName")]
            return pods if len(pods) == 2 else None

        after = {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"]
                 for p in poll(attempt_bound, 60, "the new attempt bound")}
        assert after["0"] != node and after["1"] == before["1"], (before, after)
        assert not _quarantined(core, node), "a drain is maintenance, not a fault"
    finally:
        core.patch_node(node, {"spec": {"unschedulable": False}})


def test_kubectl_drain_under_an_in_place_gang_replaces_only_the_drained_ranks_pod(operator, api_client, core, custom,
                                                                                  namespace, kubeconfig):
    """faultPolicy.restartStrategy InPlace: the drained node's rank gets a new pod elsewhere; the other ranks keep
    their pods (same uids), labelled with the new attempt, and the gang runs again."""
    create_job(custom, namespace, make_job("kept", 3, faultPolicy={"restartStrategy": "InPlace"}))
    bound = wait_bound(api_client, core, namespace, "kept", 3)
    before = {p["metadata"]["labels"]["railyard.dev/rank"]: p for p in bound}
    wait_condition(custom, namespace, "kept", "Running", timeout=60)
    node = before["0"]["spec"]["nodeName"]
    try:
        run = subprocess.run([str(rig_binary("kubectl")), "--kubeconfig", kubeconfig, "drain", node,
                              "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s"],
                             capture_output=True, text=True, timeout=150)
        assert run.returncode == 0, run.stderr
        poll(lambda: _restart_count(custom, namespace, "kept") == 1, 60, "the gang restarted once")

        def attempt_running() -> dict[str, dict] | None:
            pods = {p["metadata"]["labels"]["railyard.dev/rank"]: p
                    for p in pods_of(api_client, core, namespace, "kept") if not p["metadata"].get("deletionTimestamp")
                    and p["metadata"]["labels"].get("railyard.dev/restart-count") == "1"
                    and p["status"].get("phase") == "Running"}
            return pods if len(pods) == 3 else None

        after = poll(attempt_running, 90, "the new attempt running, every pod labelled with it")
        assert after["0"]["metadata"]["name"].startswith("kept.p1-") and after["0"]["spec"]["nodeName"] != node
        for rank in ("1", "2"):
            assert after[rank]["metadata"]["uid"] == before[rank]["metadata"]["uid"], f"rank {rank} kept its pod"
            assert after[rank]["metadata"]["name"] == f"kept-{rank}"
        wait_condition(custom, namespace, "kept", "Running", timeout=60)
        ranks = {r["rank"]: r["pod"] for r in get_job(custom, namespace, "kept")["status"]["placement"]["ranks"]}
        assert ranks == {0: after["0"]["metadata"]["name"], 1: "kept-1", 2: "kept-2"}
    finally:
        core.patch_node(node, {"spec": {"unschedulable": False}})


def test_a_restart_waits_for_old_pods_that_take_90s_to_exit_instead_of_rolling_back(operator, api_client, core,
                                                                                    custom, namespace):
    """The operator's bind timeout is 60 s here; the old pods take 90 s (a checkpoint on SIGTERM)."""
    if not _kwok(core):
        pytest.skip("needs the rig's kwok stage that honours the grace period")
    body = make_job("slow-exit", 2, annotations={"railyard.dev/simulate-termination": "graceful"})
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 90
    create_job(custom, namespace, body)
    nodes = {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"]
             for p in wait_bound(api_client, core, namespace, "slow-exit", 2)}
    wait_condition(custom, namespace, "slow-exit", "Running", timeout=60)
    core.delete_namespaced_pod("slow-exit-1", namespace)  # someone deletes a rank: the gang restarts
    poll(lambda: _restart_count(custom, namespace, "slow-exit") == 1, 60, "the restart decided")
    pods = poll(lambda: (ps := [p for p in pods_of(api_client, core, namespace, "slow-exit")
                                if p["metadata"]["name"].startswith("slow-exit.p1-") and p["spec"].get("nodeName")])
                and len(ps) == 2 and ps, 180, "the new attempt bound once its predecessors exited")
    assert {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"] for p in pods} == nodes
    job = wait_condition(custom, namespace, "slow-exit", "Placed", reason="Released")  # recorded with its Running
    assert job["status"]["restartCount"] == 1, "not rolled back as BindTimeout"
    assert not job["status"].get("avoidNodes")
    delete_job(custom, namespace, "slow-exit")
    for pod in pods_of(api_client, core, namespace, "slow-exit"):  # not another 90 s in the namespace's teardown
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_pod(pod["metadata"]["name"], namespace, grace_period_seconds=0)


def test_a_full_resource_quota_is_retried_not_taken_for_a_bad_spec(operator, api_client, core, custom, namespace):
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "two-pods"},
                                                      "spec": {"hard": {"pods": "1"}}})
    create_job(custom, namespace, make_job("quota", 2))
    job = wait_condition(custom, namespace, "quota", "Placed", "False", reason="QuotaExceeded", timeout=60)
    assert not job["status"].get("placement"), "a refused placement holds nothing"
    core.delete_namespaced_resource_quota("two-pods", namespace)
    wait_bound(api_client, core, namespace, "quota", 2, timeout=90)


def test_half_the_gangs_nodes_going_dark_together_restarts_nothing_and_clears(operator, api_client, core, custom,
                                                                             namespace):
    if not _kwok(core):
        pytest.skip("needs kwok nodes to stop a node's heartbeat")
    create_job(custom, namespace, make_job("storm", 8, faultPolicy={"nodeLossGraceSeconds": 0}))
    nodes = sorted({p["spec"]["nodeName"] for p in wait_bound(api_client, core, namespace, "storm", 8)})
    wait_condition(custom, namespace, "storm", "Running", timeout=60)
    dark = nodes[:4]
    try:
        for node in dark:
            set_kwok_label(core, node, False)
        wait_condition(custom, namespace, "storm", "Degraded", reason="Partition", timeout=90)
        assert _restart_count(custom, namespace, "storm") == 0
        assert not any(_quarantined(core, n) for n in dark)
    finally:
        for node in dark:
            set_kwok_label(core, node, True)
    wait_condition(custom, namespace, "storm", "Degraded", "False", timeout=90)
    assert _restart_count(custom, namespace, "storm") == 0, "the nodes came back: nothing to restart"
    with contextlib.suppress(client.ApiException):
        assert {p["metadata"]["name"] for p in pods_of(api_client, core, namespace, "storm")} == \
            {f"storm-{i}" for i in range(8)}
