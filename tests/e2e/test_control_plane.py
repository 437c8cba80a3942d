"""Smoke tests of the control plane itself: CRDs, labelled GPU nodes, binding, GC, node lifecycle.

They run against the local rig by default and against any cluster named by $KUBECONFIG.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from railyard.topology.cluster.labels import LABEL_TOR
from railyard.topology.cluster.nodes import build_snapshot
from railyard.topology.planner.profile import KWOK_ANNOTATION, KWOK_LABEL

from tests.support.poll import poll

pytestmark = pytest.mark.e2e
CRDS = Path(__file__).resolve().parents[2] / "crds"


def apply_crds(api_client) -> list[str]:
    ext = client.ApiextensionsV1Api(api_client)
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        try:
            current = ext.read_custom_resource_definition(name)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, body)
        except client.ApiException as e:
            if e.status != 404:
                raise
            ext.create_custom_resource_definition(body)
        names.append(name)
    return names


def test_crds_apply_and_become_established(api_client):
    ext = client.ApiextensionsV1Api(api_client)
    names = apply_crds(api_client)
    assert names, "crds/ holds no CRD"

    def established(name: str) -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    for name in names:
        poll(lambda n=name: established(n), 30, f"CRD {name} Established")


def test_gpu_nodes_carry_topology(api_client, core):
    objects = api_client.sanitize_for_serialization(core.list_node().items)
    snapshot = build_snapshot(objects)
    assert snapshot.nodes, f"no usable GPU nodes; excluded: {snapshot.excluded[:5]}"
    tors = {n.tor for n in snapshot.nodes}
    assert len(tors) >= 2, f"expected several TORs, got {tors}"
    for node in snapshot.nodes:
        assert node.gpu_count == len(node.rails) > 0
        # Real clusters' names do not encode topology; neither do ours.
        assert node.tor not in node.name
    labelled = [o for o in objects if LABEL_TOR in (o["metadata"].get("labels") or {})]
    assert len(snapshot.nodes) == len([o for o in labelled if o["metadata"]["name"] in
                                       {n.name for n in snapshot.nodes}])


def _pod(name: str, node: str, owner: dict | None = None) -> dict:
    meta: dict = {"name": name}
    if owner:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "c", "image": "registry.invalid/none:0",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def _gpu_node(api_client, core) -> str:
    snapshot = build_snapshot(api_client.sanitize_for_serialization(core.list_node().items))
    return snapshot.nodes[0].name


def test_pinned_pod_is_bound_by_kube_scheduler_and_runs(api_client, core, namespace):
    node = _gpu_node(api_client, core)
    core.create_namespaced_pod(namespace, _pod("pinned", node))
    pod = poll(lambda: (p := core.read_namespaced_pod("pinned", namespace)).status.phase == "Running" and p,
               60, "pod Running")
    assert pod.spec.node_name == node
    assert any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions)


def test_pod_of_deleted_owner_is_garbage_collected(api_client, core, namespace):
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_pod(namespace, _pod("owned", _gpu_node(api_client, core), ref))
    poll(lambda: core.read_namespaced_pod("owned", namespace), 10, "owned pod exists")
    core.delete_namespaced_config_map("owner", namespace)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("owned", namespace)
        except client.ApiException as e:
            return e.status == 404
        return False

    poll(gone, 60, "garbage collection of the owned pod")


def test_node_without_heartbeat_becomes_not_ready_and_unreachable(api_client, core):
    key, value = KWOK_LABEL
    managed = [n for n in core.list_node().items if (n.metadata.labels or {}).get(key) == value]
    if not managed:
        pytest.skip("the cluster has no kwok-managed nodes, so no heartbeat can be stopped")
    name = f"e2e-lost-{uuid.uuid4().hex[:6]}"
    template = api_client.sanitize_for_serialization(managed[0])
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {KWOK_ANNOTATION: "fake"},
                     "labels": {"kubernetes.io/hostname": name, key: value}},
        "status": {"allocatable": template["status"]["allocatable"], "capacity": template["status"]["capacity"]},
    }
    core.create_node(node)
    try:
        def ready() -> bool:
            n = core.read_node(name)
            return any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])

        poll(ready, 60, f"node {name} Ready")
        # kwok manages nodes by label: removing it stops the heartbeat and lease renewals.
        core.patch_node(name, {"metadata": {"labels": {key: None}}})

        def unreachable() -> bool:
            n = core.read_node(name)
            not_ready = any(c.type == "Ready" and c.status != "True" for c in n.status.conditions or [])
            tainted = any(t.key == "node.kubernetes.io/unreachable" for t in n.spec.taints or [])
            return not_ready and tainted

        poll(unreachable, 120, f"node {name} NotReady with the unreachable taint")
    finally:
        core.delete_node(name)
