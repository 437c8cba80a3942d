"""Multi-node NVLink domains (`nvidia.com/gpu.clique`, GB200 NVL72): a gang that fits in one stays
in it, and the quality figures count its edges as NVLink."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.labels import LABEL_GPU_CLIQUE
from railyard.topology.cluster.nodes import build_snapshot
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import profile_nodes


def _snapshot(cliques: list[str | None], tors: int = 1, busy: dict[int, int] | None = None):
    nodes = profile_nodes(leaves=1, tors=tors, nodes=len(cliques) // tors, gpus=4)
    for node, clique in zip(nodes, cliques, strict=True):
        if clique:
            node["metadata"]["labels"][LABEL_GPU_CLIQUE] = clique
    snap = build_snapshot(nodes)
    used = [(snap.nodes[i].name, range(count)) for i, count in (busy or {}).items()]
    return snap.allocate(used) if used else snap


def test_a_gang_that_fits_in_one_nvlink_domain_stays_in_it():
    # One TOR, two 4-node domains; domain c1 has 2 free nodes, c2 has 3.
    snap = _snapshot(["c1"] * 4 + ["c2"] * 4, busy={0: 4, 1: 4, 4: 4})
    decision = solve(snap, GangRequest(name="g", replicas=3, gpus_per_replica=4))
    assert {snap.node(r.node).nvlink_domain for r in decision.placement.replicas} == {"c2"}
    assert decision.placement.ring_cost == 0  # every ring edge on NVLink


def test_a_domain_in_another_tor_beats_spreading_over_one_tor():
    # TOR 0: two domains with 2 free nodes each; TOR 1: one domain with 4. A 4-node gang fits in
    # TOR 0 (one TOR either way) but only TOR 1's domain keeps it on NVLink.
    snap = _snapshot(["a"] * 2 + ["b"] * 2 + ["c"] * 4, tors=2)
    decision = solve(snap, GangRequest(name="g", replicas=4, gpus_per_replica=4))
    assert {snap.node(r.node).nvlink_domain for r in decision.placement.replicas} == {"c"}


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["x", "y", "z", None]), min_size=8, max_size=8),
       st.dictionaries(st.integers(0, 7), st.integers(1, 4), max_size=4), st.integers(1, 5),
       st.sampled_from([1, 2, 4]))
def test_whenever_one_domain_holds_the_gang_it_is_placed_there(cliques, busy, replicas, size):
    snap = _snapshot(cliques, tors=2, busy=busy)
    request = GangRequest(name="g", replicas=replicas, gpus_per_replica=size, rail_alignment=RailAlignment.NONE)
    decision = solve(snap, request)
    holders = {c for c in set(cliques) - {None}
               if sum(len(snap.free(n)) // size for n in snap.nodes if n.nvlink_domain == c) >= replicas}
    if holders:
        assert decision.placement is not None
        used = {snap.node(r.node).nvlink_domain for r in decision.placement.replicas}
        assert len(used) == 1 and used <= holders, (used, holders)
