"""Table-driven tests of the placement decision."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.api.job import Parallelism
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.solver.commgraph import ModelHints
from railyard.topology.solver.placement import solve
from railyard.topology.solver.quality import ring_cost
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import nodes_in_tor, snapshot

GPU8 = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}


def req(replicas: int, gpus: int = 8, **kw) -> GangRequest:
    return GangRequest(name="j", replicas=replicas, gpus_per_replica=gpus, **kw)


def placed_nodes(decision):
    return [r.node for r in decision.placement.replicas]


def test_gang_fits_in_one_tor_when_it_can():
    snap = snapshot()  # 1 spine, 2 leaves x 2 TORs x 4 nodes
    d = solve(snap, req(4))
    assert (d.placement.tors, d.placement.leaves, d.placement.spines) == (1, 1, 1)


def test_best_fit_prefers_the_fullest_tor_that_fits():
    snap = snapshot()
    busy = nodes_in_tor(snap, "tor-0-1-0")[:2]
    snap = snap.allocate((n, range(8)) for n in busy)
    d = solve(snap, req(2))
    assert {snap.node(n).tor for n in placed_nodes(d)} == {"tor-0-1-0"}


def test_spans_as_few_domains_as_possible_top_down():
    snap = snapshot(spines=2, leaves=2, tors=2, nodes=4)
    d = solve(snap, req(12))  # a leaf holds 8, a spine 16
    assert (d.placement.spines, d.placement.leaves, d.placement.tors) == (1, 2, 3)


def test_all_or_nothing_when_capacity_is_short():
    snap = snapshot(leaves=1, tors=1, nodes=4)
    d = solve(snap, req(5))
    assert d.placement is None
    assert "cluster has 4 free whole nodes on 4 eligible nodes, job needs 5" in d.reason


def test_required_tier_reason_names_the_tier():
    snap = snapshot()
    d = solve(snap, req(6, required_tier="tor"))
    assert d.placement is None
    assert d.reason.startswith("requiredTier tor: largest TOR (")
    assert "has 4 free whole nodes, job needs 6" in d.reason


def test_required_tier_is_honoured_even_if_it_costs_capacity():
    snap = snapshot()
    d = solve(snap, req(8, required_tier="leaf"))
    assert d.placement.leaves == 1 and len(d.placement.replicas) == 8


def test_elastic_job_takes_the_largest_count_that_fits():
    snap = snapshot(leaves=1, tors=1, nodes=4)
    d = solve(snap, req(8, min_replicas=2))
    assert len(d.placement.replicas) == 4
    assert solve(snap, req(8, min_replicas=5)).placement is None


def test_partial_replicas_stay_inside_an_nvlink_island_and_numa_node():
    snap = snapshot(leaves=1, tors=1, nodes=1, gpuNvlink=[0, 0, 0, 0, 1, 1, 1, 1], gpuNuma=[0, 0, 1, 1, 0, 0, 1, 1])
    d = solve(snap, req(2, gpus=2, rail_alignment=RailAlignment.NONE))
    node = snap.nodes[0]
    for r in d.placement.replicas:
        assert len({node.nvlink[g] for g in r.gpus}) == 1 and len({node.numa[g] for g in r.gpus}) == 1


def test_required_rail_alignment_uses_the_same_rails_on_every_replica():
    snap = snapshot(leaves=1, tors=1, nodes=2)
    node_a, node_b = (n.name for n in snap.nodes)
    snap = snap.allocate([(node_a, [0, 1, 2, 3]), (node_b, [4, 5, 6, 7])])
    # Both nodes have 4 free GPUs, but on different rails: an aligned pair does not exist.
    d = solve(snap, req(2, gpus=4, rail_alignment=RailAlignment.REQUIRED))
    assert d.placement is None and "railAlignment required" in d.reason
    d = solve(snap, req(2, gpus=4, rail_alignment=RailAlignment.PREFERRED))
    assert d.placement is not None and not d.placement.rail_aligned


def test_local_ranks_sit_on_the_same_rail_across_replicas():
    # 3 x 4 GPUs: neither one node nor an even number of whole nodes, so one replica per node.
    snap = snapshot(leaves=1, tors=1, nodes=3, gpuRail=[0, 1, 2, 3, 4, 5, 6, 7])
    d = solve(snap, req(3, gpus=4, rail_alignment=RailAlignment.REQUIRED))
    rails = [[snap.node(r.node).rails[g] for g in r.gpus] for r in d.placement.replicas]
    assert len({r.node for r in d.placement.replicas}) == 3 and rails[0] == rails[1] == rails[2]


def test_small_gangs_pack_onto_nodes_and_stay_rail_aligned_in_a_snake():
    snap = snapshot(leaves=1, tors=2, nodes=4)
    one = solve(snap, req(2, gpus=4, rail_alignment=RailAlignment.REQUIRED))
    assert one.placement is not None and len({r.node for r in one.placement.replicas}) == 1, "fits on one node"
    assert one.placement.rail_aligned, "no cross-node edge at all"
    d = solve(snap, req(4, gpus=4, rail_alignment=RailAlignment.PREFERRED))  # make demo's sft-4x4
    p = d.placement
    assert p is not None and len({r.node for r in p.replicas}) == 2 and p.tors == 1 and p.rail_aligned
    rails = [tuple(snap.node(r.node).rails[g] for g in r.gpus) for r in p.replicas]
    assert rails[1] == rails[2] and rails[3] == rails[0], "each ring leaves a node on the rails it enters the next"
    odd = solve(snap, req(6, gpus=4, rail_alignment=RailAlignment.REQUIRED))  # 3 whole nodes cannot snake
    assert odd.placement is not None and odd.placement.rail_aligned


@settings(max_examples=60, deadline=None)
@given(replicas=st.integers(2, 8), size=st.sampled_from([1, 2, 4]),
       alignment=st.sampled_from([RailAlignment.PREFERRED, RailAlignment.REQUIRED]))
def test_a_gang_that_fits_on_one_node_is_placed_on_one_node(replicas, size, alignment):
    snap = snapshot(leaves=1, tors=2, nodes=4, used={"gpu-0000": [0, 1, 2]})
    if replicas * size > 8:
        return
    d = solve(snap, req(replicas, gpus=size, rail_alignment=alignment))
    assert d.placement is not None and len({r.node for r in d.placement.replicas}) == 1
    assert d.placement.rail_aligned


def test_ranks_follow_the_topology_so_the_ring_is_cheap():
    snap = snapshot(spines=2, leaves=2, tors=2, nodes=4)
    d = solve(snap, req(12))
    nodes = [snap.node(r.node) for r in d.placement.replicas]
    # DFS order: every TOR is one contiguous run of ranks, so the ring changes TOR once per TOR.
    tors = [n.tor for n in nodes]
    changes = sum(tors[i] != tors[(i + 1) % len(tors)] for i in range(len(tors)))
    assert changes == d.placement.tors
    assert d.placement.ring_cost == ring_cost(nodes)


def _tors_by_rank(hints):
    snap = snapshot(leaves=1, tors=2, nodes=4)
    # 8 replicas x 8 GPUs, tensor 8, 4 pipeline stages -> 2 data-parallel chains of 4 stages.
    d = solve(snap, req(8, parallelism=Parallelism(tensor=8, pipeline=4, data=2), model=hints))
    return [snap.node(r.node).tor for r in d.placement.replicas]


def test_pipeline_chains_stay_in_one_tor_when_activations_dominate():
    # A 100M-parameter model: gradients are small, each chain's activations are what moves.
    tor_of_rank = _tors_by_rank(ModelHints(parameters=100_000_000))
    for chain in range(2):
        stages = [tor_of_rank[p * 2 + chain] for p in range(4)]
        assert len(set(stages)) == 1, f"chain {chain} crosses TORs: {stages}"


def test_data_parallel_pairs_stay_in_one_tor_when_gradients_dominate():
    # The default 7B model: a stage's gradient all-reduce (437 MB an edge) outweighs a step's
    # activations between stages (134 MB), so the two replicas of each stage share a TOR instead.
    tor_of_rank = _tors_by_rank(None)
    for stage in range(4):
        assert tor_of_rank[stage * 2] == tor_of_rank[stage * 2 + 1], tor_of_rank


def test_node_selector_and_taints_filter_nodes():
    snap = snapshot()
    d = solve(snap, req(2, pod_spec={**GPU8, "nodeSelector": {"topology.railyard.dev/leaf": "leaf-0-1"}}))
    assert {snap.node(r.node).leaf for r in d.placement.replicas} == {"leaf-0-1"}
    d = solve(snap, req(2, pod_spec={**GPU8, "nodeSelector": {"pool": "nope"}}))
    assert d.placement is None and "excluded: 16 nodeSelector" in d.reason


def test_required_tier_node_packs_one_node():
    snap = snapshot(leaves=1, tors=1, nodes=2)
    snap = snap.allocate([(snap.nodes[0].name, [0, 1, 2, 3, 4])])
    d = solve(snap, req(3, gpus=1, required_tier="node"))
    assert {r.node for r in d.placement.replicas} == {snap.nodes[0].name}  # best fit: the fuller node


def test_same_input_same_output():
    snap = snapshot(spines=2)
    assert solve(snap, req(10)) == solve(snap, req(10))


def test_preferred_tier_still_keeps_the_upper_tiers_tight():
    snap = snapshot(spines=2, leaves=2, tors=2, nodes=4)  # a leaf holds 8 nodes, a spine 16
    d = solve(snap, req(12, preferred_tier="leaf"))
    assert (d.placement.leaves, d.placement.spines) == (2, 1)
