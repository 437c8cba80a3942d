"""Elastic resize: valid sizes, which replicas a shrink drops, where a grow lands."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.api.job import Parallelism
from railyard.topology.solver.elastic import choose_shrink, largest_valid, solve_growth, valid_size
from railyard.topology.solver.placement import solve
from railyard.topology.solver.replace import RankSlot
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import snapshot


def test_only_data_parallel_sizes_are_valid():
    tp_pp = Parallelism(tensor=8, pipeline=4)  # 32 GPUs per data-parallel replica of the model
    assert valid_size(4, 8, tp_pp) and valid_size(8, 8, tp_pp) and not valid_size(6, 8, tp_pp)
    assert largest_valid(7, 1, 8, tp_pp) == 4 and largest_valid(3, 1, 8, tp_pp) is None
    assert largest_valid(7, 1, 8, None) == 7
    fixed = Parallelism(tensor=8, pipeline=1, data=4)
    assert valid_size(4, 8, fixed) and not valid_size(3, 8, fixed)


def test_a_shrink_drops_the_least_dense_tor_first():
    snap = snapshot(leaves=1, tors=3, nodes=4)
    tor_of = {n.name: n.tor for n in snap.nodes}
    by_tor: dict[str, list[str]] = {}
    for n in snap.nodes:
        by_tor.setdefault(n.tor, []).append(n.name)
    tors = sorted(by_tor)
    # 4 ranks in the first TOR, 3 in the second, 1 in the third
    names = by_tor[tors[0]] + by_tor[tors[1]][:3] + by_tor[tors[2]][:1]
    ranks = [RankSlot(i, n, tuple(range(8))) for i, n in enumerate(names)]
    kept = choose_shrink(ranks, {n.name: n for n in snap.nodes}, 2)
    assert Counter(tor_of[s.node] for s in kept) == {tors[0]: 4, tors[1]: 2}
    assert [s.rank for s in kept] == sorted(s.rank for s in kept), "survivors keep their relative order"


def test_a_grow_keeps_every_current_rank_and_lands_next_to_the_job():
    snap = snapshot(leaves=2, tors=2, nodes=4)
    request = GangRequest("j", 3, 8, required_tier="leaf")
    decision = solve(snap, request)
    assert decision.placement is not None
    keep = [RankSlot(r.rank, r.node, r.gpus) for r in decision.placement.replicas]
    held = snap.allocate(decision.placement.allocations)
    grown = solve_growth(held, request, keep, 2)
    assert grown.found and [r.rank for r in grown.replacements] == [3, 4]
    leaf = {snap.node(s.node).leaf for s in keep}
    assert {snap.node(r.new).leaf for r in grown.replacements} == leaf, "inside the required leaf"
    assert not {r.new for r in grown.replacements} & {s.node for s in keep}
    too_many = solve_growth(held, request, keep, 6)  # the leaf has 8 nodes: 3 used, 5 free
    assert not too_many.found and "inside" in (too_many.reason or "")


@settings(max_examples=40, deadline=None)
@given(drop=st.integers(0, 8), spread=st.lists(st.integers(0, 3), min_size=8, max_size=8))
def test_shrink_keeps_exactly_the_rest(drop, spread):
    snap = snapshot(leaves=2, tors=2, nodes=4)
    names = [n.name for n in snap.nodes]
    ranks = [RankSlot(i, names[(i * 4 + t) % len(names)], ()) for i, t in enumerate(spread)]
    kept = choose_shrink(ranks, {n.name: n for n in snap.nodes}, drop)
    assert len(kept) == len(ranks) - drop and set(kept) <= set(ranks)


def test_new_ranks_that_cannot_stay_near_pack_into_as_few_tors_as_possible():
    # superpod-2k: a 128-node job fills its leaf (4 TORs of 32); shrink by 32, grow by 64: 32 go back to
    # the leaf, 32 must go elsewhere in the spine, and should take one TOR, not scatter.
    import yaml
    from railyard.topology.cluster.nodes import build_snapshot
    from railyard.topology.planner.profile import ClusterProfile, node_objects

    from tests.support.rig import REPO

    profile = ClusterProfile.model_validate(yaml.safe_load((REPO / "examples/clusters/superpod-2k.yaml").read_text()))
    snap = build_snapshot(node_objects(profile, kwok=False))
    request = GangRequest("e", 128, 8, min_replicas=32)
    decision = solve(snap, request)
    assert decision.placement is not None
    slots = [RankSlot(r.rank, r.node, r.gpus) for r in decision.placement.replicas]
    kept = choose_shrink(slots, {n.name: n for n in snap.nodes}, 32)
    held = snap.allocate((s.node, list(s.gpus)) for s in kept)
    grown = solve_growth(held, request, [RankSlot(i, s.node, s.gpus) for i, s in enumerate(kept)], 64)
    assert grown.found
    assert len({snap.node(r.new).tor for r in grown.replacements}) == 2
