"""The circuit breaker's rule (decide/policy.partition), against a plain restatement of it: the early
return when no node holding ranks counts (every pass of a healthy cluster) changes no answer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.operator.decide.policy import Partition, partition
from railyard.topology.cluster.faults import NodeHealth


def reference(health, ranked, leaf_of, now, was_tripped, window, share, min_nodes) -> Partition:
    nodes = sorted(set(ranked))
    unready = tuple(n for n in nodes if (h := health.get(n)) is not None and not h.ready)
    recent = [n for n in unready if health[n].not_ready_seen is not None and now - health[n].not_ready_seen <= window]
    counted = unready if was_tripped else tuple(recent)
    many = len(counted) >= min_nodes and len(counted) > share * len(nodes)
    by_leaf: dict[str, list[str]] = {}
    for n in nodes:
        by_leaf.setdefault(leaf_of.get(n, ""), []).append(n)
    dark = [leaf for leaf, members in sorted(by_leaf.items())
            if leaf and len(members) >= min_nodes and all(m in counted for m in members)]
    return Partition(bool(many or dark), unready, len(nodes))


def node(name: str, ready: bool, seen: float | None) -> NodeHealth:
    return NodeHealth(name, (), 8, (), ready, "True" if ready else "False", False, None,
                      not_ready_seen=None if ready else seen)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(0, 200), st.integers(0, 3)), min_size=0, max_size=24),
       st.booleans(), st.floats(0.05, 0.9), st.integers(0, 4), st.integers(0, 30))
def test_partition_answers_as_the_plain_rule_does(nodes, was_tripped, share, min_nodes, unranked):
    health = {f"n{i}": node(f"n{i}", ready, seen) for i, (ready, seen, _) in enumerate(nodes)}
    leaf_of = {f"n{i}": f"leaf{leaf}" for i, (_, _, leaf) in enumerate(nodes)}
    ranked = [f"n{i}" for i in range(len(nodes)) if i % 31 != unranked]
    got = partition(health, ranked, leaf_of, 200.0, was_tripped, 60.0, share, min_nodes)
    want = reference(health, ranked, leaf_of, 200.0, was_tripped, 60.0, share, min_nodes)
    assert (got.tripped, got.unready, got.ranked) == (want.tripped, want.unready, want.ranked)
