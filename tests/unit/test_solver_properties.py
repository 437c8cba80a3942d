"""Property tests of the solver's invariants on random clusters and jobs (hypothesis)."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.node_rules import eligible_nodes
from railyard.topology.solver.placement import _best_option, _candidates, _objective, _scopes, solve
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import snapshot


@st.composite
def scenarios(draw):
    shape = {
        "spines": draw(st.integers(1, 2)), "leaves": draw(st.integers(1, 2)),
        "tors": draw(st.integers(1, 3)), "nodes": draw(st.integers(1, 4)),
    }
    gpus = draw(st.sampled_from([4, 8]))
    snap = snapshot(gpus=gpus, **shape)
    used = {}
    for node in snap.nodes:
        taken = draw(st.sets(st.integers(0, gpus - 1), max_size=gpus))
        if taken:
            used[node.name] = sorted(taken)
    snap = snap.allocate(used.items())
    size = draw(st.sampled_from([1, 2, 4, 8][: 3 if gpus == 4 else 4]))
    replicas = draw(st.integers(1, 12))
    request = GangRequest(
        name="p", replicas=replicas, gpus_per_replica=size,
        min_replicas=draw(st.integers(1, replicas)),
        required_tier=draw(st.sampled_from([None, "node", "tor", "leaf", "spine"])),
        preferred_tier=draw(st.sampled_from([None, "node", "tor"])),
        rail_alignment=draw(st.sampled_from(list(RailAlignment))),
    )
    levels = snap.levels
    if request.required_tier and request.preferred_tier and \
            levels.index(request.preferred_tier) > levels.index(request.required_tier):
        request = GangRequest(**{**request.__dict__, "preferred_tier": None})
    return snap, request


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants(scenario):
    snap, request = scenario
    decision = solve(snap, request)
    assert decision == solve(snap, request), "same input, same output"
    if snap.replica_slots(size := request.gpus_per_replica) < request.smallest:
        assert decision.placement is None, f"placed with fewer {size}-GPU slots free than the gang's smallest size"
    if decision.placement is None:
        assert decision.reason
        return
    replicas = decision.placement.replicas
    # Gang: all or nothing, within [minReplicas, replicas].
    assert request.smallest <= len(replicas) <= request.replicas
    assert [r.rank for r in replicas] == list(range(len(replicas)))
    # Never double-book: only free GPUs, each at most once.
    seen = Counter((r.node, g) for r in replicas for g in r.gpus)
    assert all(c == 1 for c in seen.values())
    for r in replicas:
        assert len(r.gpus) == request.gpus_per_replica
        assert set(r.gpus) <= set(snap.free(snap.node(r.node)))
    snap.allocate(decision.placement.allocations)  # raises on any clash
    # Required tier: one domain.
    if request.required_tier is not None:
        level = snap.levels.index(request.required_tier)
        assert len({snap.levels.domain_of(snap.node(r.node), level) for r in replicas}) == 1
    # Required rail alignment: local rank j on the same rail everywhere.
    if request.rail_alignment == RailAlignment.REQUIRED:
        assert decision.placement.rail_aligned


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_placement_is_maximal_when_capacity_allows(scenario):
    """If the whole gang fits by GPU count in one node-free way, an unconstrained job is placed."""
    snap, request = scenario
    if request.required_tier or request.rail_alignment != RailAlignment.NONE:
        return
    slots = sum(len(snap.free(n)) // request.gpus_per_replica for n in snap.nodes)
    decision = solve(snap, request)
    assert decision.placed == (slots >= request.smallest)
    if decision.placed:
        assert len(decision.placement.replicas) == min(slots, request.replicas)



@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_scopes_skipped_by_their_bound_change_no_choice(scenario):
    """The solver skips a scope whose lower bound cannot beat the best found; looking at every scope
    on its own picks the same scope and the same nodes."""
    snap, request = scenario
    nodes, at, _, caps = eligible_nodes(snap, request, None)
    for candidate in _candidates(snap, nodes, at, request, caps):
        scopes = _scopes(snap, candidate, request)
        need = min(request.replicas, max((scope.capacity for _, scope in scopes), default=0))
        if need < request.smallest or need == 0:
            continue
        chosen = _best_option(snap, candidate, request, need, scopes)
        objective = _objective(request, snap.levels)
        alone = [option for scope in scopes if (option := _best_option(snap, candidate, request, need, [scope]))]
        best = min(alone, key=lambda o: (objective(o.selection.counts), o.selection.broken, o.scope_cap, o.scope_id),
                   default=None)
        assert (chosen is None) == (best is None)
        if chosen is not None and best is not None:
            assert (chosen.scope_id, chosen.selection.takes) == (best.scope_id, best.selection.takes)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_replica_slots_off_some_nodes_are_those_of_the_snapshot_without_them(scenario, data):
    snap, request = scenario
    names = [node.name for node in snap.nodes]
    off = frozenset(data.draw(st.sets(st.sampled_from([*names, "not-a-node"]))))
    size = request.gpus_per_replica
    expected = snap.without_nodes(off).replica_slots(size)
    assert snap.replica_slots(size, off) == expected
    assert snap.replica_slots(size, off) == expected, "asked again, from the snapshot's scratch"
