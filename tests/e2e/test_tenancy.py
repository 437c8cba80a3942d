"""Multi-tenant safety on the real control plane (issue 21): what one tenant creates never takes
capacity, priority or nodes from another."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from kubernetes import client

from tests.support.jobs import create_job, make_job, wait_bound
from tests.support.poll import poll

pytestmark = pytest.mark.e2e


def _free_gpu_nodes(core, count: int) -> list[str]:
    """`count` schedulable, untainted 8-GPU nodes with no pod on them."""
    busy = {p.spec.node_name for p in core.list_pod_for_all_namespaces().items
            if p.spec.node_name and (p.status.phase or "") not in ("Succeeded", "Failed")}
    nodes = [n.metadata.name for n in core.list_node().items
             if not n.spec.unschedulable and not n.spec.taints and n.metadata.name not in busy
             and (n.status.allocatable or {}).get("nvidia.com/gpu") == "8"]
    if len(nodes) < count:
        pytest.skip(f"needs {count} idle 8-GPU nodes, the cluster has {len(nodes)}")
    return sorted(nodes)[:count]


def test_look_alike_gated_pinned_pods_of_another_tenant_change_nothing(operator, api_client, core, custom,
                                                                       namespace, tenant):
    """64 pods carrying Railyard's GPU annotation, a pin and a gate, asking for 0 GPUs, on the very
    nodes a job needs: Railyard sees those nodes idle, as kube-scheduler does, and places the job."""
    nodes = _free_gpu_nodes(core, 4)
    for i in range(64):
        node = nodes[i % len(nodes)]
        core.create_namespaced_pod(tenant, {
            "metadata": {"name": f"squat-{i}", "labels": {"railyard.dev/job-name": "job"},
                         "annotations": {"railyard.dev/gpus": "0,1,2,3,4,5,6,7"}},
            "spec": {"schedulingGates": [{"name": "railyard.dev/gang"}],
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                 "values": [node]}]}]}}},
                     "containers": [{"name": "c", "image": "registry.invalid/x:0"}]}})
    poll(lambda: len(core.list_namespaced_pod(tenant).items) == 64, 30, "64 look-alike pods exist")
    job = make_job("wanted", 4)
    job["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                     "values": nodes}]}]}}}
    create_job(custom, namespace, job)
    placed = wait_bound(api_client, core, namespace, "wanted", 4, timeout=90)
    assert sorted(p["spec"]["nodeName"] for p in placed) == nodes


@pytest.fixture
def priority_classes(api_client):
    scheduling = client.SchedulingV1Api(api_client)
    made: list[str] = []

    def make(name: str, value: int) -> None:
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value, "preemptionPolicy": "Never"})
        made.append(name)

    yield make
    for name in made:
        with contextlib.suppress(client.ApiException):
            scheduling.delete_priority_class(name)


def test_a_job_waits_by_name_for_its_priority_class_and_its_pods_carry_it(operator, api_client, core, custom,
                                                                          namespace, priority_classes):
    from tests.support.jobs import wait_condition

    name = f"e2e-gold-{uuid.uuid4().hex[:6]}"
    job = make_job("classy", 1)
    job["spec"]["priorityClassName"] = name
    create_job(custom, namespace, job)
    waiting = wait_condition(custom, namespace, "classy", "Placed", "False", reason="PriorityClassNotFound")
    message = next(c for c in waiting["status"]["conditions"] if c["type"] == "Placed")["message"]
    assert name in message and not core.list_namespaced_pod(namespace).items
    priority_classes(name, 4242)
    pods = wait_bound(api_client, core, namespace, "classy", 1, timeout=60)
    assert (pods[0]["spec"]["priorityClassName"], pods[0]["spec"]["priority"]) == (name, 4242)


def _as_operator(identity):
    from kubernetes import config

    return client.CoreV1Api(config.new_client_from_config(config_file=identity.kubeconfig))


def test_the_operators_account_cannot_create_an_unowned_pod_anywhere(identity, core):
    """RBAC lets the operator create pods in every namespace; the chart's ValidatingAdmissionPolicy
    refuses any that is not a TrainingJob's."""
    with pytest.raises(client.ApiException) as err:
        _as_operator(identity).create_namespaced_pod("kube-system", {
            "metadata": {"name": f"stolen-{uuid.uuid4().hex[:6]}"},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/miner:0"}]}})
    assert err.value.status == 403 and "only objects owned by a TrainingJob" in err.value.body, err.value.body


def test_the_operators_account_cannot_take_over_another_services_endpoint_slice(identity, api_client, core,
                                                                                   namespace):
    """RBAC lets the operator update EndpointSlices everywhere (its jobs' rank names); the policy refuses
    replacing one it does not manage, even dressed up as a TrainingJob's."""
    from kubernetes import config

    mine = client.DiscoveryV1Api(api_client)
    theirs = {"metadata": {"name": "payments", "labels": {"kubernetes.io/service-name": "payments",
                                                          "endpointslice.kubernetes.io/managed-by": "someone-else"}},
              "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.2.3"]}]}
    mine.create_namespaced_endpoint_slice(namespace, theirs)
    stored = mine.read_namespaced_endpoint_slice("payments", namespace)
    operator = client.DiscoveryV1Api(config.new_client_from_config(config_file=identity.kubeconfig))
    hijack = api_client.sanitize_for_serialization(stored)
    hijack["metadata"]["labels"].update({"railyard.dev/job-name": "payments",
                                         "endpointslice.kubernetes.io/managed-by": "operator.railyard.dev"})
    hijack["metadata"]["ownerReferences"] = [{"apiVersion": "railyard.dev/v1alpha1", "kind": "TrainingJob",
                                              "name": "payments", "uid": str(uuid.uuid4()), "controller": True}]
    hijack["endpoints"] = [{"addresses": ["10.6.6.6"]}]
    with pytest.raises(client.ApiException) as err:
        operator.replace_namespaced_endpoint_slice("payments", namespace, hijack)
    assert err.value.status == 403, err.value.body
    assert mine.read_namespaced_endpoint_slice("payments", namespace).endpoints[0].addresses == ["10.1.2.3"]


def test_the_operators_account_changes_only_its_quarantine_taint_and_annotations_on_nodes(identity, core):
    node = sorted(n.metadata.name for n in core.list_node().items)[-1]
    other = {"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}
    taints = [t.to_dict() for t in core.read_node(node).spec.taints or []]
    core.patch_node(node, {"spec": {"taints": [*taints, other]}})
    operator = _as_operator(identity)
    try:
        mine = {"key": "railyard.dev/unhealthy", "value": "Test", "effect": "NoSchedule"}
        operator.patch_node(node, {"spec": {"taints": [*taints, other, mine]}})  # its own: allowed
        attempts = {
            "remove another's taint": {"spec": {"taints": [*taints, mine]}},
            "label the node": {"metadata": {"labels": {"stolen": "yes"}}},
            "annotate outside railyard.dev/": {"metadata": {"annotations": {"example.com/x": "y"}}},
            "cordon": {"spec": {"unschedulable": True}},
            "its taint as NoExecute (evicts every pod)": {"spec": {"taints": [
                *taints, other, {**mine, "effect": "NoExecute"}]}},
            "another railyard.dev/ taint": {"spec": {"taints": [
                *taints, other, mine, {"key": "railyard.dev/drain", "value": "x", "effect": "NoExecute"}]}},
            "another railyard.dev/ annotation": {"metadata": {"annotations": {"railyard.dev/anything": "y"}}},
        }
        for what, patch in attempts.items():
            with pytest.raises(client.ApiException) as err:
                operator.patch_node(node, patch)
            assert err.value.status == 403 and "only the railyard.dev/unhealthy:NoSchedule taint" in err.value.body, \
                (what, err.value.body)
    finally:
        current = [t.to_dict() for t in core.read_node(node).spec.taints or []]
        core.patch_node(node, {"spec": {"taints": [t for t in current if t["key"] not in (
            other["key"], "railyard.dev/unhealthy")] or None}})
