"""Capacity comes from what is real (issue 21): the GPU annotation and node pin count only for a pod
owned by the TrainingJob whose placement names it; any other pod holds its requests once bound, as
kube-scheduler counts. A tenant's look-alike pods never make the cluster look full."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.cluster.nodes import build_snapshot
from railyard.topology.cluster.pod_trust import trust_placements

from tests.support import status as cond
from tests.support.clusters import profile_nodes
from tests.support.harness import rig
from tests.support.jobs import make_job

GATE = "railyard.dev/gang"


def look_alike(i: int, node: str, *, namespace: str = "tenant", job: str | None = None, owner: str | None = None,
               bound: bool = False, gpus_requested: int = 0, name: str | None = None) -> dict[str, Any]:
    """What a tenant can create: Railyard's annotation, a pin, a gate, labels and an ownerReference
    of their choosing."""
    meta: dict[str, Any] = {"name": name or f"squat-{i}", "namespace": namespace,
                            "annotations": {"railyard.dev/gpus": "0,1,2,3,4,5,6,7"},
                            "labels": {"railyard.dev/job-name": job} if job else {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "railyard.dev/v1alpha1", "kind": "TrainingJob", "name": job or "x",
                                    "uid": owner, "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": {
        "limits": {"nvidia.com/gpu": str(gpus_requested)}} if gpus_requested else {}}]}
    if bound:
        spec["nodeName"] = node
    else:
        spec["schedulingGates"] = [{"name": GATE}]
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def add_pod(r, body: dict[str, Any]) -> None:
    r.api._store("pods", body, "ADDED")
    r.deliver()


def test_gated_pinned_annotated_pods_of_a_tenant_hold_nothing():
    r = rig(nodes=4)
    for i, node in enumerate(sorted(r.state.nodes)):
        add_pod(r, look_alike(i, node))
    assert not r.state.snapshot().used, "unbound look-alikes must not hold GPUs"
    r.submit(make_job("big", 4, gpus_per_replica=8))
    r.step()
    assert (r.condition("big", cond.PLACED) or {}).get("status") == "True", "the whole cluster is free for it"


def test_a_bound_pod_holds_what_it_requests_not_what_it_annotates():
    r = rig(nodes=1)
    node = next(iter(r.state.nodes))
    add_pod(r, look_alike(0, node, bound=True, gpus_requested=2))
    assert len(r.state.snapshot().used[node]) == 2


def test_a_forged_owner_or_job_label_is_not_enough():
    r = rig(nodes=2)
    r.submit(make_job("llm", 1, gpus_per_replica=8))
    r.step()
    job = r.api.objects["trainingjobs"][("default", "llm")]
    uid = job["metadata"]["uid"]
    held = r.nodes_of("llm")[0]
    other = next(n for n in sorted(r.state.nodes) if n != held)
    add_pod(r, look_alike(0, other, namespace="default", job="llm", owner=uid, name="llm-extra"))
    used = r.state.snapshot().used
    assert set(used) == {held}, "a pod the placement does not name claims nothing, whatever its owner"


def test_the_jobs_own_gated_pods_hold_their_gpus_before_binding_in_any_arrival_order():
    r = rig(nodes=2)
    r.submit(make_job("llm", 2, gpus_per_replica=8))
    r.step()  # placed: pods exist, gated
    assert {n: len(g) for n, g in r.state.snapshot().used.items()} == {n: 8 for n in r.nodes_of("llm")}
    # An operator that lists pods before jobs sees the pods untrusted first, then believes them.
    from railyard.operator.cache.state import ClusterState

    fresh = ClusterState(clock=r.clock)
    for kind in ("nodes", "pods", "trainingjobs"):
        items, rv = r.api.listing(kind)
        fresh.replace(kind, items, rv)
    assert fresh.snapshot().used == r.state.snapshot().used


def test_the_cli_counts_the_same_way():
    nodes = profile_nodes(leaves=1, tors=1, nodes=2)
    names = sorted(n["metadata"]["name"] for n in nodes)
    pods = [look_alike(0, names[0]), look_alike(1, names[1], bound=True, gpus_requested=3)]
    snap = build_snapshot(nodes, pods, trusted=trust_placements([]))
    assert {n: len(g) for n, g in snap.used.items()} == {names[1]: 3}


_pods = st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.integers(0, 8), st.booleans(), st.booleans()),
                 max_size=12)


@settings(max_examples=60, deadline=None)
@given(_pods)
def test_property_foreign_pods_hold_exactly_their_bound_requests(specs):
    """Whatever a tenant's pods claim (annotation, pin, gate, job label, an owner uid), what they hold
    per node is the sum of the GPU requests of those bound there (capped at the node's GPUs)."""
    r = rig(nodes=4)
    r.submit(make_job("llm", 1, gpus_per_replica=8))
    r.step()
    uid = r.api.objects["trainingjobs"][("default", "llm")]["metadata"]["uid"]
    names = sorted(r.state.nodes)
    mine = set(r.nodes_of("llm"))
    expected: dict[str, int] = {n: 8 for n in mine}
    for i, (n, bound, gpus, labelled, owned) in enumerate(specs):
        node = names[n]
        add_pod(r, look_alike(i, node, namespace="default", job="llm" if labelled else None,
                              owner=uid if owned else None, bound=bound, gpus_requested=gpus))
        if bound:
            expected[node] = min(8, expected.get(node, 0) + gpus)
    used = {n: len(g) for n, g in r.state.snapshot().used.items()}
    assert used == {n: c for n, c in expected.items() if c}
