"""The solver's node filter over arrays (node_rules.eligible_nodes without explanations) agrees with the
node-by-node filter it replaces: the same nodes, the same rejection counts, and the same replicas
per node once its GPU slots are counted."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.node_fit import UNLIMITED, node_fit
from railyard.topology.cluster.node_rules import eligible_nodes
from railyard.topology.cluster.resources import replicas_that_fit
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import fabric_node

RESOURCES = ("cpu", "memory", "pods", "rdma/ib")


@st.composite
def clusters(draw):
    nodes, requested = [], {}
    for i in range(draw(st.integers(1, 12))):
        gpus = draw(st.sampled_from([4, 8]))
        offered = draw(st.lists(st.sampled_from(RESOURCES), unique=True))
        allocatable = {name: draw(st.integers(0, 8)) * 1000 for name in offered}
        nodes.append(replace(fabric_node(0, i % 2, i % 3, i, gpus), allocatable=allocatable))
        if draw(st.booleans()):
            requested[nodes[-1].name] = {name: draw(st.integers(0, 8)) * 1000 for name in
                                         draw(st.lists(st.sampled_from(RESOURCES), unique=True))}
    need = {name: draw(st.integers(0, 3)) * 1000 for name in draw(st.lists(st.sampled_from(RESOURCES), unique=True))}
    nodes.sort(key=lambda n: n.name)
    return Snapshot(tuple(nodes), requested=requested), need, draw(st.sampled_from([0, 1, 2, 4, 8]))


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_the_array_fit_is_replicas_that_fit_on_every_node(cluster):
    snapshot, need, _ = cluster
    fit = node_fit(snapshot, need, frozenset())
    for i, node in enumerate(snapshot.nodes):
        expected, binding = replicas_that_fit(node.allocatable, snapshot.requested_on(node.name), need)
        if not node.allocatable:
            assert fit.fit[i] == UNLIMITED
            continue
        assert min(int(fit.fit[i]), UNLIMITED) == min(expected, UNLIMITED)
        if binding is not None and expected < UNLIMITED:
            assert fit.resources[fit.binding[i]] == binding


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_eligible_over_arrays_matches_the_node_by_node_filter(cluster):
    snapshot, need, gpus = cluster
    request = GangRequest(name="g", replicas=2, gpus_per_replica=gpus, resources=need)
    fast_nodes, fast_at, fast_rejected, fast_caps = eligible_nodes(snapshot, request, None)
    slow_nodes, slow_at, slow_rejected, slow_caps = eligible_nodes(snapshot, request, None, why={})
    assert fast_at.tolist() == slow_at.tolist() == [snapshot.positions()[n.name] for n in fast_nodes]
    assert fast_nodes == slow_nodes
    assert fast_rejected == slow_rejected
    for node in slow_nodes:
        slots = node.gpu_count // gpus if gpus else 1
        assert min(slots, fast_caps.get(node.name, slots)) == min(slots, slow_caps.get(node.name, slots))
