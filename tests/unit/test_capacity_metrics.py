"""The capacity gauges published after every pass (base/metrics.observe_capacity) against the
snapshot's own per-node free GPUs."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from railyard.operator.base.metrics import observe_capacity

from tests.support.clusters import snapshot


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.integers(0, 31), st.sets(st.integers(0, 7), max_size=8), max_size=20))
def test_free_gpus_and_largest_free_blocks_match_the_snapshot(busy):
    snap = snapshot(spines=2, leaves=2, tors=2, nodes=4)
    names = [n.name for n in snap.nodes]
    snap = snapshot({names[i]: sorted(gpus) for i, gpus in busy.items()}, spines=2, leaves=2, tors=2, nodes=4)
    observe_capacity(snap)
    empty = [n for n in snap.nodes if len(snap.free(n)) == n.gpu_count]
    assert REGISTRY.get_sample_value("railyard_free_gpus") == sum(len(snap.free(n)) for n in snap.nodes)
    assert REGISTRY.get_sample_value("railyard_largest_free_block_nodes", {"tier": "cluster"}) == len(empty)
    by_tor = Counter(n.tor for n in empty)
    assert REGISTRY.get_sample_value("railyard_largest_free_block_nodes", {"tier": "tor"}) == max(by_tor.values(),
                                                                                                  default=0)
