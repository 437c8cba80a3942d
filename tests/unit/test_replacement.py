"""solve_replacement: survivors stay, lost ranks are re-homed jointly, next to where they were, on the
placement's rails, inside the required domain; optimal against brute force on small cases."""

from __future__ import annotations

from itertools import permutations

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.placement import solve
from railyard.topology.solver.replace import RankSlot, distance, solve_replacement
from railyard.topology.solver.request import GangRequest

from tests.support.clusters import snapshot


def placed(snap: Snapshot, request: GangRequest) -> tuple[Snapshot, list[RankSlot]]:
    decision = solve(snap, request)
    assert decision.placement is not None, decision.reason
    slots = [RankSlot(r.rank, r.node, r.gpus) for r in decision.placement.replicas]
    return snap.allocate(decision.placement.allocations), slots


def lose(snap: Snapshot, slots: list[RankSlot], dead: set[str]):
    """The snapshot after the dead nodes vanished: their GPUs free nowhere, survivors still held."""
    lost_nodes = {n: snap.node(n) for n in dead}
    after = snap.without_nodes(frozenset(dead))
    keep = [s for s in slots if s.node not in dead]
    lost = [s for s in slots if s.node in dead]
    return after, keep, lost, lost_nodes


def test_a_lost_node_is_replaced_inside_its_tor_keeping_every_survivor():
    snap = snapshot(leaves=2, tors=2, nodes=4)  # 16 nodes, 4 per TOR
    request = GangRequest("j", 3, 8)
    snap, slots = placed(snap, request)
    dead = {slots[1].node}
    after, keep, lost, lost_nodes = lose(snap, slots, dead)
    decision = solve_replacement(after, request, keep, lost, lost_nodes)
    assert decision.found and [r.rank for r in decision.replacements] == [1]
    (r,) = decision.replacements
    assert r.same_tor and r.new not in {s.node for s in keep} and len(r.gpus) == 8


def test_when_the_tor_is_full_the_replacement_goes_one_tier_up_but_never_outside_the_required_domain():
    snap = snapshot(leaves=2, tors=2, nodes=2)  # 8 nodes: 2 per TOR, 4 per leaf
    request = GangRequest("j", 2, 8, required_tier="leaf")
    snap, slots = placed(snap, request)
    tor = snap.node(slots[0].node).tor
    assert all(snap.node(s.node).tor == tor for s in slots), "a 2-node gang fits one TOR"
    after, keep, lost, lost_nodes = lose(snap, slots, {slots[0].node})
    decision = solve_replacement(after, request, keep, lost, lost_nodes)
    (r,) = decision.replacements
    assert r.distance == 2 and after.node(r.new).leaf == snap.node(slots[1].node).leaf
    # Fill the rest of the leaf: now nothing fits inside it, although the other leaf is empty.
    leaf = snap.node(slots[1].node).leaf
    busy = [n.name for n in after.nodes if n.leaf == leaf and n.name != slots[1].node]
    full = after.allocate((n, range(8)) for n in busy)
    refused = solve_replacement(full, request, keep, lost, lost_nodes)
    assert not refused.found and "inside leaf-" in refused.reason


def test_partial_node_replicas_keep_the_placement_rails():
    snap = snapshot(leaves=1, tors=1, nodes=4)
    request = GangRequest("j", 3, 4, rail_alignment=RailAlignment.REQUIRED)
    snap, slots = placed(snap, request)
    rails = {tuple(sorted(snap.node(s.node).rails[g] for g in s.gpus)) for s in slots}
    assert len(rails) == 1
    after, keep, lost, lost_nodes = lose(snap, slots, {slots[0].node})
    decision = solve_replacement(after, request, keep, lost, lost_nodes)
    for r in decision.replacements:
        assert tuple(sorted(after.node(r.new).rails[g] for g in r.gpus)) in rails and r.aligned


@st.composite
def scenarios(draw):
    shape = {"leaves": draw(st.integers(1, 2)), "tors": draw(st.integers(1, 2)), "nodes": draw(st.integers(2, 3))}
    snap = snapshot(**shape)
    busy = draw(st.sets(st.sampled_from([n.name for n in snap.nodes]), max_size=len(snap.nodes) // 2))
    snap = snap.allocate((n, range(8)) for n in busy)
    free_nodes = len(snap.nodes) - len(busy)
    replicas = draw(st.integers(2, max(2, min(4, free_nodes))))
    return snap, replicas, draw(st.integers(0, 10 ** 6))


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_replacement_properties_and_optimal_total_distance(case):
    snap, replicas, seed = case
    request = GangRequest("j", replicas, 8)
    decision = solve(snap, request)
    if decision.placement is None:
        return
    snap = snap.allocate(decision.placement.allocations)
    slots = [RankSlot(r.rank, r.node, r.gpus) for r in decision.placement.replicas]
    nodes = sorted({s.node for s in slots})
    dead = {nodes[seed % len(nodes)]} | ({nodes[(seed // 7) % len(nodes)]} if seed % 2 else set())
    after, keep, lost, lost_nodes = lose(snap, slots, dead)
    result = solve_replacement(after, request, keep, lost, lost_nodes)
    free_whole = [n for n in after.nodes if len(after.free(n)) == 8]
    assert result.found == (len(free_whole) >= len(lost)), result.reason
    if not result.found:
        return
    assert sorted(r.rank for r in result.replacements) == sorted(s.rank for s in lost)
    taken = [(r.new, g) for r in result.replacements for g in r.gpus]
    assert len(taken) == len(set(taken)), "a GPU given twice"
    assert not any(g in after.used.get(n, ()) for n, g in taken), "a GPU in use given away"
    # Optimal: no assignment of lost ranks to free whole nodes has a smaller total distance.
    best = min(sum(distance(snap.node(s.node), after.node(n)) for s, n in zip(lost, choice, strict=True))
               for choice in permutations([n.name for n in free_whole], len(lost)))
    assert sum(r.distance for r in result.replacements) == best
