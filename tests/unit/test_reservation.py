"""What a starving gang holds (decide/queue.reserved_nodes): few enough nodes that the jobs behind it keep
the rest, enough that it fits them once they drain, and a choice that only moves towards freer nodes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.operator.decide.queue import QueuedJob, reserved_nodes
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import snapshot

SHAPE = {"spines": 2, "leaves": 2, "tors": 2, "nodes": 4}  # 32 nodes of 8 GPUs, 8 TORs of 4


@st.composite
def busy_clusters(draw: st.DrawFn) -> Snapshot:
    snap = snapshot(**SHAPE)
    used = {n.name: list(range(draw(st.integers(0, 8)))) for n in snap.nodes}
    return snap.allocate((k, v) for k, v in used.items() if v)


gangs = st.builds(lambda replicas, gpus, tier: GangRequest("g", replicas, gpus, required_tier=tier),
                  st.integers(1, 20), st.sampled_from([1, 2, 4, 8]), st.sampled_from([None, "tor", "leaf"]))


def held(snap: Snapshot, nodes: frozenset[str], gpus_per_replica: int = 8) -> tuple[int, int]:
    """Replicas the nodes hold now, then their free GPUs."""
    free = [len(snap.free(snap.node(n))) for n in nodes]
    return sum(f // gpus_per_replica for f in free), sum(free)


@settings(max_examples=150, deadline=None)
@given(busy_clusters(), gangs)
def test_the_gang_fits_the_held_nodes_once_they_drain_and_none_is_spare(snap: Snapshot, gang: GangRequest):
    reserved = reserved_nodes(QueuedJob(("ns", "g"), 0, 0.0, gang), snap)
    if solve(snap.emptied(), gang).placement is None:
        return  # can never fit: such a job never holds a reservation (test_routine)
    assert reserved, "a gang that fits the empty cluster holds something"
    drained = snap.emptied().only_nodes(reserved)
    assert solve(drained, gang).placement is not None, "held nodes that could never hold the gang"
    per_node = 8 // gang.gpus_per_replica
    assert (len(reserved) - 1) * per_node < gang.replicas, "a node more than the gang needs is held"
    if gang.required_tier is not None:
        level = snap.levels.index(gang.required_tier)
        assert len({snap.levels.domain_of(snap.node(n), level) for n in reserved}) == 1


@settings(max_examples=150, deadline=None)
@given(busy_clusters(), st.integers(1, 12), st.data())
def test_the_held_nodes_only_get_freer_while_others_take_and_free_the_rest(snap: Snapshot, replicas: int,
                                                                          data: st.DataObject):
    job = QueuedJob(("ns", "g"), 0, 0.0, GangRequest("g", replicas, 8))
    reserved = reserved_nodes(job, snap)
    for _ in range(4):
        # Jobs behind it take or free GPUs anywhere but on the held nodes; the held nodes' own jobs may end.
        outside = [n for n in snap.nodes if n.name not in reserved]
        changed = data.draw(st.lists(st.sampled_from(outside), max_size=6, unique=True)) if outside else []
        freed_inside = data.draw(st.lists(st.sampled_from(sorted(reserved)), max_size=2, unique=True))
        before = held(snap, reserved)
        snap = snap.release([(n.name, snap.used.get(n.name, frozenset())) for n in changed]
                            + [(n, snap.used.get(n, frozenset())) for n in freed_inside])
        snap = snap.allocate([(n.name, range(data.draw(st.integers(0, 8)))) for n in changed])
        after_reserved = reserved_nodes(job, snap)
        assert held(snap, after_reserved) >= before, "the reservation moved to nodes less free than it held"
        assert len(after_reserved) == len(reserved)
        reserved = after_reserved


@settings(max_examples=150, deadline=None)
@given(busy_clusters(), st.integers(1, 20), st.sampled_from([1, 2, 4, 8]))
def test_a_gang_that_only_prefers_a_tier_waits_for_no_fewer_free_gpus_than_any_tier_would_give_it(
        snap: Snapshot, replicas: int, gpus: int):
    preferring = reserved_nodes(QueuedJob(("ns", "g"), 0, 0.0, GangRequest("g", replicas, gpus)), snap)
    for tier in ("tor", "leaf", "spine"):
        confined = reserved_nodes(QueuedJob(("ns", "g"), 0, 0.0,
                                            GangRequest("g", replicas, gpus, required_tier=tier)), snap)
        if confined:
            assert held(snap, preferring, gpus) >= held(snap, confined, gpus), \
                f"held nodes busier than the freest {tier}'s, for a gang that only prefers a tier"


def test_a_preferring_gang_holds_free_nodes_across_tors_rather_than_wait_for_a_busy_tor():
    snap = snapshot(**SHAPE)  # 8 TORs of 4 nodes
    # Every TOR has 3 nodes busy and one empty: no TOR (or leaf) could hold 4 replicas now.
    first_of_tor = {n.tor: n.name for n in reversed(snap.nodes)}
    busy = [n.name for n in snap.nodes if n.name not in first_of_tor.values()]
    snap = snap.allocate((n, range(8)) for n in busy)
    preferring = reserved_nodes(QueuedJob(("ns", "g"), 0, 0.0, GangRequest("g", 4, 8)), snap)
    assert held(snap, preferring) == (4, 32), "four empty nodes exist; the gang waits for nothing"
    confined = reserved_nodes(QueuedJob(("ns", "g"), 0, 0.0, GangRequest("g", 4, 8, required_tier="tor")), snap)
    assert len({snap.node(n).tor for n in confined}) == 1 and held(snap, confined) == (1, 8), \
        "a required TOR is still one TOR, waiting for its three busy nodes"
