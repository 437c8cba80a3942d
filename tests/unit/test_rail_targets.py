"""railAlignment: required finds a rail-aligned placement whenever one exists (brute-force oracle on
tiny clusters), including on partly used nodes whose free GPUs fit no empty-node grouping."""

from __future__ import annotations

from bench.core.rails import EIGHT, aligned_placement_exists, rail_node
from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest

node = rail_node


def required(replicas: int, size: int) -> GangRequest:
    return GangRequest("j", replicas, size, rail_alignment=RailAlignment.REQUIRED)


def test_partly_used_nodes_align_on_the_rails_they_have_free():
    # GPUs 0, 3, 4 and 7 busy on both nodes: free rails 1, 2, 5, 6 - no empty-node grouping of 4.
    snap = Snapshot((node("a"), node("b")), {"a": frozenset({0, 3, 4, 7}), "b": frozenset({0, 3, 4, 7})})
    decision = solve(snap, required(2, 4))
    assert decision.placement is not None, decision.reason
    assert [sorted(r.gpus) for r in decision.placement.replicas] == [[1, 2, 5, 6], [1, 2, 5, 6]]
    assert decision.placement.rail_aligned


def rails_of(n: GpuNode, gpus) -> tuple[int, ...]:
    return tuple(sorted(n.rails[g] for g in gpus))


@st.composite
def clusters(draw):
    nodes = []
    used = {}
    for i in range(draw(st.integers(1, 3))):
        layout = draw(st.sampled_from(["rail-per-gpu", "two-per-rail", "random"]))
        if layout == "rail-per-gpu":
            rails = EIGHT
        elif layout == "two-per-rail":
            rails = tuple(g // 2 for g in range(8))
        else:
            rails = tuple(draw(st.lists(st.integers(0, 7), min_size=8, max_size=8)))
        n = node(f"n{i}", rails)
        nodes.append(n)
        used[n.name] = frozenset(draw(st.sets(st.integers(0, 7), max_size=6)))
    return Snapshot(tuple(nodes), used)


@settings(max_examples=300, deadline=None)
@given(snap=clusters(), replicas=st.integers(2, 5), size=st.integers(1, 4))
def test_required_alignment_places_exactly_when_brute_force_can(snap, replicas, size):
    decision = solve(snap, required(replicas, size))
    assert decision.placed == aligned_placement_exists(snap, replicas, size), decision.reason
    if decision.placement is not None:  # every cross-node ring edge on one rail (quality.rail_aligned)
        replicas = decision.placement.replicas
        for a, b in zip(replicas, [*replicas[1:], replicas[0]], strict=True):
            if a.node != b.node:
                assert rails_of(snap.node(a.node), a.gpus) == rails_of(snap.node(b.node), b.gpus), (a, b)


def test_a_gang_never_mixes_gpu_products_unless_its_template_lists_several():
    h100 = [GpuNode(f"h{i}", "s", "l", "t", EIGHT, (0,) * 8, (0,) * 8, product="H100",
                     labels={"nvidia.com/gpu.product": "H100"}) for i in range(4)]
    a100 = [GpuNode(f"a{i}", "s", "l", "t", EIGHT, (0,) * 8, (0,) * 8, product="A100",
                     labels={"nvidia.com/gpu.product": "A100"}) for i in range(4)]
    snap = Snapshot(tuple(sorted(h100 + a100, key=lambda n: n.name)))
    small = solve(snap, GangRequest("j", 3, 8))
    assert len({snap.node(r.node).product for r in small.placement.replicas}) == 1
    big = solve(snap, GangRequest("j", 6, 8))
    assert big.placement is None and "GPU products are not mixed in one gang: A100 (4 nodes), H100 (4 nodes)" \
        in big.reason
    both = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100", "H100"]}]}]}}},
        "containers": [{"name": "c"}]}
    mixed = solve(snap, GangRequest("j", 6, 8, pod_spec=both))
    assert mixed.placement is not None and len({snap.node(r.node).product for r in mixed.placement.replicas}) == 2
