"""Save on fault's coverage rule (topology/solver/shard_cover.py), property-tested over random layouts and lost
sets: every shard is saved exactly once by a survivor exactly when some data-parallel replica of it survives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from railyard.topology.api.job import Parallelism
from railyard.topology.solver.commgraph import Layout
from railyard.topology.solver.shard_cover import cover


@st.composite
def layouts(draw: st.DrawFn) -> tuple[Layout, int, frozenset[int]]:
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    tensor = draw(st.sampled_from([t for t in (1, 2, 4, 8, 16) if t <= 2 * gpus]))
    pipeline = draw(st.integers(1, 4))
    data = draw(st.integers(1, 6))
    world = tensor * pipeline * data
    if world % gpus:
        data *= gpus // (world % gpus) if gpus % (world % gpus) == 0 else gpus
        world = tensor * pipeline * data
    replicas = world // gpus
    layout = Layout.of(replicas, gpus, Parallelism(tensor=tensor, pipeline=pipeline))
    assert layout is not None
    lost = draw(st.frozensets(st.integers(0, replicas - 1), max_size=replicas))
    return layout, replicas, lost


@given(layouts())
def test_every_shard_is_saved_once_by_a_survivor_exactly_when_one_of_its_replicas_survives(case):
    layout, replicas, lost = case
    result = cover(layout, replicas, lost)
    saved: list[tuple[int, int]] = []
    for replica, ranks in result.savers.items():
        assert replica not in lost and 0 <= replica < replicas
        saved.extend(result.shard_of(replica, r, layout) for r in ranks)
    assert len(saved) == len(set(saved)), "a shard saved twice"
    every = {(t, p) for t in range(layout.tensor) for p in range(layout.pipeline)}
    assert set(saved) | set(result.lost_shards) == every and not set(saved) & set(result.lost_shards)
    for t, p in every:
        holders = {layout.gpu(t, d, p) // layout.gpus_per_replica for d in range(layout.data)}
        assert ((t, p) in result.lost_shards) == holders.issubset(lost)
    assert result.covered == (not result.lost_shards and len(lost) < replicas)


def test_pure_data_parallel_is_covered_by_any_survivor_and_lost_with_every_replica():
    layout = Layout.of(4, 8, None)
    assert layout is not None
    one_left = cover(layout, 4, frozenset({0, 1, 3}))
    assert one_left.covered and one_left.savers == {2: (0,)}, "one copy of the whole model, saved once"
    assert not cover(layout, 4, frozenset(range(4))).covered


def test_a_tensor_group_across_two_replicas_needs_a_survivor_of_each_of_its_halves():
    # TP16 over 8-GPU replicas, 2 data-parallel copies: replicas 0-1 are copy 0, replicas 2-3 copy 1.
    layout = Layout.of(4, 8, Parallelism(tensor=16))
    assert layout is not None
    assert cover(layout, 4, frozenset({0, 3})).covered, "copy 1's first half and copy 0's second half"
    assert cover(layout, 4, frozenset({0, 2})).lost_shards == tuple((t, 0) for t in range(8))
