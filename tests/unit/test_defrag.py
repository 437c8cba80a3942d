"""The migration planner (topology/solver/defrag.py): a gang that fits by free GPUs but not by topology lands
in one domain after the fewest, cheapest moves; every move lands outside that domain, on free GPUs."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from railyard.topology.solver.defrag import Mover, fits_by_gpus, plan_migration
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.victims import RunningGang

from tests.support.clusters import snapshot


def _mover(key: str, nodes: list[str], lost: float = 0.0, tier: str | None = "tor") -> Mover:
    gang = RunningGang(key, 0, tuple((n, tuple(range(8))) for n in nodes), lost)
    return Mover(gang, GangRequest(key.split("/")[1], len(nodes), 8, required_tier=tier))


def test_one_small_gang_moves_to_the_other_tor_so_a_tor_gang_fits():
    snap = snapshot(leaves=1, tors=2, nodes=2)
    tors: dict[str, list[str]] = {}
    for node in snap.nodes:
        tors.setdefault(node.tor, []).append(node.name)
    (t0, (a0, _)), (t1, (b0, _)) = sorted(tors.items())
    movers = [_mover("ns/a", [a0], lost=100), _mover("ns/b", [b0], lost=5)]
    occupied = snap.allocate([(a0, tuple(range(8))), (b0, tuple(range(8)))])
    request = GangRequest("w", 2, 8, required_tier="tor")
    assert fits_by_gpus(occupied, request) and not solve(occupied, request).placed
    plan = plan_migration(occupied, request, movers)
    assert plan is not None and [m.key for m in plan.moves] == ["ns/b"], "the one losing less work moves"
    assert plan.domain == t1 and {r.node for r in plan.placement.replicas} == set(tors[t1])
    assert [snap.node(r.new).tor for r in plan.moves[0].replacements] == [t0]


def test_no_plan_when_the_gpus_are_not_there_at_all():
    snap = snapshot(leaves=1, tors=2, nodes=2)
    names = [n.name for n in snap.nodes]
    occupied = snap.allocate([(n, tuple(range(8))) for n in names[:3]])
    assert plan_migration(occupied, GangRequest("w", 2, 8, required_tier="tor"),
                          [_mover("ns/a", names[:1])]) is None


@st.composite
def clusters(draw):
    snap = snapshot(spines=1, leaves=1, tors=draw(st.integers(2, 3)), nodes=draw(st.integers(2, 4)))
    names = [n.name for n in snap.nodes]
    movers: list[Mover] = []
    used: list[tuple[str, tuple[int, ...]]] = []
    free = set(names)
    for index in range(draw(st.integers(1, 5))):
        width = draw(st.integers(1, 2))
        hosts = [n for n in names if n in free][:width] if draw(st.booleans()) else \
            [n for n in reversed(names) if n in free][:width]
        if len(hosts) < width:
            break
        free -= set(hosts)
        used += [(h, tuple(range(8))) for h in hosts]
        movers.append(_mover(f"ns/g{index}", hosts, draw(st.floats(0, 1e5)), tier=draw(st.sampled_from([None, "tor"]))))
    request = GangRequest("w", draw(st.integers(2, 4)), 8, required_tier="tor")
    return snap.allocate(used), request, movers


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_plan_invariants(case):
    occupied, request, movers = case
    assume(not solve(occupied, request).placed)
    plan = plan_migration(occupied, request, movers)
    if plan is None:
        return
    keys = {m.gang.key: m for m in movers}
    assert plan.moves and all(m.key in keys for m in plan.moves)
    held: Counter = Counter()
    moved = {m.key for m in plan.moves}
    for mover in movers:  # what stays: the unmoved gangs, and the moved gangs' ranks outside the domain
        for node, gpus in mover.gang.slots:
            if mover.gang.key not in moved or node not in plan.nodes:
                held.update((node, g) for g in gpus)
    for move in plan.moves:
        assert set(move.leaves) <= plan.nodes
        for r in move.replacements:
            assert r.new not in plan.nodes, "every move lands outside the cleared domain"
            held.update((r.new, g) for g in r.gpus)
        if keys[move.key].request.required_tier == "tor":
            kept = [n for n, _ in keys[move.key].gang.slots if n not in plan.nodes]
            homes = {occupied.node(n).tor for n in [*kept, *(r.new for r in move.replacements)]}
            assert len(homes) == 1, "a moved gang keeps its required tier"
    for replica in plan.placement.replicas:
        assert replica.node in plan.nodes
        held.update((replica.node, g) for g in replica.gpus)
    assert not [k for k, v in held.items() if v > 1], "nothing double-booked after the moves"
