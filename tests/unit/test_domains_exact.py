"""The domain selection is exact: on random fabrics it matches an independent MILP (0 gap), for
every objective depth (nodes counted, TOR, leaf, spine preferred), with whole (empty) nodes broken
only when fewer domains or no partly used node can do without."""

from __future__ import annotations

from bench.core.exact import optimum, weighted
from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.solver.domain_tree import build_tree, counts_of
from railyard.topology.solver.domains import objective_for, select_best

from tests.support.clusters import fabric_node


@st.composite
def fabrics(draw):
    """Ragged trees: every spine, leaf and TOR has its own number of children; slots 0..4 a node."""
    slots = []
    for s in range(draw(st.integers(1, 3))):
        for lf in range(draw(st.integers(1, 3))):
            for t in range(draw(st.integers(1, 4))):
                for n in range(draw(st.integers(1, 4))):
                    slots.append((fabric_node(s, lf, t, n), draw(st.integers(0, 4))))
    total = sum(c for _, c in slots)
    need = draw(st.integers(1, max(1, total)))
    empty = frozenset(n.name for n, _ in slots if draw(st.booleans()))
    return slots, need, empty


def _weighted(counts, lowest_level: int) -> int:
    nodes, tors, leaves, spines = (c if level >= lowest_level else 0 for level, c in enumerate(counts))
    return weighted(tors, leaves, spines, nodes)


@settings(max_examples=150, deadline=None)
@given(fabrics(), st.sampled_from([None, 1, 2, 3]))
def test_selection_matches_the_milp(fabric, preferred_level):
    slots, need, empty = fabric
    best = optimum(slots, need, lowest_level=preferred_level or 0, empty=empty)
    total = sum(c for _, c in slots)
    if total < need:
        assert best is None
        return
    objective = objective_for(preferred_level)
    selection = select_best(build_tree(slots, 3, free_gpus=lambda n: 8 if n.name in empty else 4), need, objective)
    capacity = dict((n.name, c) for n, c in slots)
    assert sum(k for _, k in selection.takes) == need
    assert all(0 < k <= capacity[n.name] for n, k in selection.takes)
    assert len({n.name for n, _ in selection.takes}) == len(selection.takes)
    assert selection.counts == counts_of(selection.takes)
    assert _weighted(selection.counts, objective.lowest_level) == best


def test_the_greedy_counter_example_is_solved_exactly():
    # Leaf A: TORs with 8, 1, 1 slots; leaf B the same. 16 replicas need both leaves; taking leaf A
    # whole (largest first) costs 4 TORs, 8 + 8 on the two big TORs costs 2.
    slots = []
    for leaf in range(2):
        for tor, cap in enumerate((8, 1, 1)):
            slots += [(fabric_node(0, leaf, tor, i), 1) for i in range(cap)]
    selection = select_best(build_tree(slots, 3, free_gpus=lambda n: 8), 16, objective_for(None))
    assert selection.counts[1:] == (2, 2, 1)


def test_a_preferred_tier_never_crosses_a_spine_to_save_a_tor():
    # Spine 0 holds the gang in 3 TORs; spine 1 and 2 together hold it in 2 TORs.
    slots = [(fabric_node(0, 0, t, 0), 4) for t in range(3)]
    slots += [(fabric_node(1, 0, 0, 0), 6), (fabric_node(2, 0, 0, 0), 6)]
    selection = select_best(build_tree(slots, 3, free_gpus=lambda n: 8), 12, objective_for(1))
    assert selection.counts[1:] == (3, 1, 1)


def test_a_small_gang_takes_partly_used_nodes_before_breaking_a_whole_one():
    slots = [(fabric_node(0, 0, 0, 0), 2), (fabric_node(0, 0, 0, 1), 1), (fabric_node(0, 0, 0, 2), 1)]
    partly_used = {"n-0-0-0-1", "n-0-0-0-2"}
    free = lambda n: 4 if n.name in partly_used else 8  # noqa: E731
    selection = select_best(build_tree(slots, 3, free_gpus=free), 2, objective_for(None))
    assert {n.name for n, _ in selection.takes} == partly_used and selection.broken == 0
    # With no partly used room at all, one whole node is broken for it.
    selection = select_best(build_tree(slots[:1], 3, free_gpus=free), 2, objective_for(None))
    assert selection.counts[0] == 1 and selection.broken == 1


@settings(max_examples=150, deadline=None)
@given(fabrics(), st.sampled_from([None, 1, 2, 3]))
def test_solving_only_the_demand_costs_what_the_full_dp_does(fabric, preferred_level):
    """The shortcut that solves only the children holding the whole gang (when their level is
    counted) finds a placement of the full dynamic program's cost."""
    from railyard.topology.solver.domains import _solve, _solve_exactly, _weights

    slots, need, empty = fabric
    root = build_tree(slots, 3, free_gpus=lambda n: 8 if n.name in empty else 4)
    if root.cap < need:
        return
    weights = _weights(root, need, objective_for(preferred_level))
    exactly = _solve_exactly([root], [0], need, weights)[0]
    assert exactly.costs[need] == _solve([root], [0], need, weights)[0].costs[need]


@st.composite
def tables(draw):
    """A fabric whose nodes (4 or 8 GPUs, some used, in shuffled order) each offer 0..3 slots, as a
    solve sees them: slots, their free GPUs, and the node table of their snapshot."""
    nodes, free = [], []
    for s in range(draw(st.integers(1, 2))):
        for lf in range(draw(st.integers(1, 2))):
            for t in range(draw(st.integers(1, 3))):
                for n in range(draw(st.integers(1, 4))):
                    gpus = draw(st.sampled_from([4, 8]))
                    nodes.append(fabric_node(s, lf, t, n, gpus))
                    free.append(draw(st.sampled_from([gpus, gpus, gpus // 2, 1])))
    order = draw(st.permutations(range(len(nodes))))
    nodes, free = [nodes[i] for i in order], [free[i] for i in order]
    counts = [draw(st.sampled_from([0, 1, 1, 1, 2, 3])) for _ in nodes]
    return nodes, free, counts


@settings(max_examples=200, deadline=None)
@given(tables(), st.integers(1, 12), st.sampled_from([None, 1, 2, 3]))
def test_the_tree_built_from_arrays_selects_what_the_loop_does(case, need, preferred_level):
    import numpy as np
    from railyard.topology.cluster.model import Snapshot
    from railyard.topology.cluster.node_arrays import node_arrays

    nodes, free, counts = case
    slots = list(zip(nodes, counts, strict=True))
    table = node_arrays(Snapshot(tuple(nodes)))  # nodes not in name order: the tree must sort them
    assert table.tor is not None
    of = dict(zip((n.name for n in nodes), free, strict=True))
    by_loop = build_tree(slots, 3, free_gpus=lambda n: of[n.name])
    by_arrays = build_tree(slots, 3, free_gpus=lambda n: of[n.name], table=table,
                           free=np.array(free, dtype=np.int64))
    assert by_loop.census == by_arrays.census and by_loop.cap == by_arrays.cap
    if by_loop.cap < need:
        return
    objective = objective_for(preferred_level)
    one, other = select_best(by_loop, need, objective), select_best(by_arrays, need, objective)
    assert (one.counts, one.broken) == (other.counts, other.broken)
    assert sorted((n.name, k) for n, k in one.takes) == sorted((n.name, k) for n, k in other.takes)
