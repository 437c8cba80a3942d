"""The usage arrays a snapshot carries (topology/cluster/node_usage.py) always say what its maps say: after any
chain of allocations and releases, and in the operator's cache after any sequence of pods arriving,
changing node or leaving, and nodes coming and going."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.operator.cache.state import ClusterState
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.node_usage import NodeUsage

from tests.support.clusters import fabric_node, profile_nodes

RESOURCES = ("cpu", "memory", "pods", "rdma/ib")


def _says_what_its_maps_say(snapshot: Snapshot) -> bool:
    """The snapshot's arrays equal those derived from its maps (a resource missing on one side: zeros)."""
    carried, derived = snapshot.node_usage(), NodeUsage.of(snapshot.nodes, snapshot.used, snapshot.requested)
    zeros = np.zeros(len(carried.free), dtype=np.int64)
    return np.array_equal(carried.free, derived.free) and all(
        np.array_equal(carried.requested.get(name, zeros), derived.requested.get(name, zeros))
        for name in set(carried.requested) | set(derived.requested))


@st.composite
def steps(draw):
    """A cluster and a chain of allocate/release steps on it (each releases only what it holds)."""
    nodes = tuple(sorted((fabric_node(0, i % 2, i % 3, i, draw(st.sampled_from([4, 8])))
                          for i in range(draw(st.integers(1, 8)))), key=lambda n: n.name))
    chain = []
    for _ in range(draw(st.integers(1, 12))):
        node = draw(st.sampled_from(nodes))
        gpus = draw(st.lists(st.integers(0, node.gpu_count - 1), unique=True, max_size=3))
        requests = {name: draw(st.integers(1, 4)) * 1000 for name in
                    draw(st.lists(st.sampled_from(RESOURCES), unique=True, max_size=3))}
        chain.append((node.name, gpus, requests, draw(st.booleans())))
    return nodes, chain


@settings(max_examples=200, deadline=None)
@given(steps(), st.booleans())
def test_allocate_and_release_keep_the_arrays_equal_to_the_maps(case, derive_first):
    nodes, chain = case
    snapshot = Snapshot(nodes)
    if derive_first:  # arrays present from the start: every step rewrites them incrementally
        snapshot.node_usage()
    held: list[tuple[str, list[int], dict[str, int]]] = []
    for name, gpus, requests, release in chain:
        if release and held:
            node, taken, asked = held.pop()
            snapshot = snapshot.release([(node, taken)], asked)
        else:
            free = set(snapshot.free(snapshot.node(name)))
            gpus = [g for g in gpus if g in free]
            snapshot = snapshot.allocate([(name, gpus)], requests)
            held.append((name, gpus, requests))
        assert _says_what_its_maps_say(snapshot)
    assert [len(snapshot.free(n)) for n in snapshot.nodes] == snapshot.node_usage().free.tolist()


def _pod(i: int, node: str, gpus: int, cpu: int) -> dict:
    return {"metadata": {"name": f"p{i}", "namespace": "d", "resourceVersion": str(i + 1)},
            "spec": {"nodeName": node,
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus},
                                                                 "requests": {"cpu": f"{cpu}"}}}]},
            "status": {"phase": "Running"}}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "move", "delete", "drop-node", "add-node"]),
                          st.integers(0, 5), st.integers(0, 7), st.integers(0, 8), st.integers(1, 4)),
                max_size=25))
def test_the_operators_snapshots_carry_arrays_equal_to_their_maps(events):
    nodes = profile_nodes(leaves=1, tors=2, nodes=4)
    state = ClusterState()
    state.replace("nodes", nodes, None)
    state.replace("pods", [], None)
    names = [n["metadata"]["name"] for n in nodes]
    version = 100
    for verb, pod, node, gpus, cpu in events:
        version += 1
        body = _pod(pod, names[node], gpus, cpu)
        body["metadata"]["resourceVersion"] = str(version)
        if verb in ("add", "move"):
            state.apply_pod("MODIFIED", body)
        elif verb == "delete":
            state.apply_pod("DELETED", body)
        elif verb == "drop-node":
            state.apply_node("DELETED", {**nodes[node], "metadata": {**nodes[node]["metadata"],
                                                                     "resourceVersion": str(version)}})
        else:
            state.apply_node("ADDED", {**nodes[node], "metadata": {**nodes[node]["metadata"],
                                                                   "resourceVersion": str(version)}})
        snapshot = state.snapshot()
        assert _says_what_its_maps_say(snapshot)
        assert sorted(snapshot.used) == sorted(n for n, g in snapshot.used.items() if g)
