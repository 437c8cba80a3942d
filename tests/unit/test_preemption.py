"""The victim chooser (topology/solver/victims.py): one domain, cheapest victims, none it does not need."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.victims import RunningGang, plan_in_domain, plan_preemption

from tests.support.clusters import nodes_in_tor, snapshot


def _gang(key: str, nodes: list[str], priority: int = 0, lost: float = 0.0, gpus: int = 8) -> RunningGang:
    return RunningGang(key, priority, tuple((n, tuple(range(gpus))) for n in nodes), lost)


def _occupied(snap: Snapshot, gangs: list[RunningGang]) -> Snapshot:
    return snap.allocate(slot for g in gangs for slot in g.slots)


def test_a_full_tor_is_cleared_of_the_gangs_that_lose_least_work():
    snap = snapshot(leaves=1, tors=2, nodes=4)
    tor0, tor1 = (nodes_in_tor(snap, t) for t in sorted({n.tor for n in snap.nodes}))
    gangs = [_gang("a/fresh", tor0[:2], lost=10), _gang("a/stale", tor0[2:], lost=5000),
             _gang("b/x", tor1[:2], lost=100), _gang("b/y", tor1[2:], lost=200)]
    plan = plan_preemption(_occupied(snap, gangs), GangRequest("p", 4, 8, required_tier="tor"), gangs)
    assert plan is not None
    assert {v.key for v in plan.victims} == {"b/x", "b/y"}, "300 GPU-s lost beats 5010"
    assert plan.nodes == frozenset(tor1)
    assert {r.node for r in plan.placement.replicas} == set(tor1)


def test_lower_priority_victims_win_over_less_work_lost():
    snap = snapshot(leaves=1, tors=2, nodes=2)
    tor0, tor1 = (nodes_in_tor(snap, t) for t in sorted({n.tor for n in snap.nodes}))
    gangs = [_gang("a/low", tor0, priority=1, lost=9e6), _gang("b/mid", tor1, priority=5, lost=1)]
    plan = plan_preemption(_occupied(snap, gangs), GangRequest("p", 2, 8, required_tier="tor"), gangs)
    assert plan is not None and [v.key for v in plan.victims] == ["a/low"]


def test_no_victim_is_taken_that_the_gang_does_not_need():
    snap = snapshot(leaves=1, tors=1, nodes=4)
    nodes = [n.name for n in snap.nodes]
    # The cheapest (tiny) gang alone frees too little; the big one suffices alone.
    gangs = [_gang("a/tiny", nodes[:1], lost=1, gpus=2), _gang("a/big", nodes[1:3], lost=50)]
    snapped = _occupied(snap, gangs)
    found = plan_in_domain(snapped, GangRequest("p", 3, 8, required_tier="tor"), frozenset(nodes), gangs)
    assert found is not None
    assert [v.key for v in found[0]] == ["a/big"]


def test_no_plan_when_nothing_can_make_room():
    snap = snapshot(leaves=1, tors=1, nodes=2)
    nodes = [n.name for n in snap.nodes]
    blocker = _gang("a/x", nodes[:1])
    occupied = _occupied(snap, [blocker])
    # The other node is taken by something that is not a candidate (higher priority, not preemptible).
    occupied = occupied.allocate([(nodes[1], tuple(range(8)))])
    assert plan_preemption(occupied, GangRequest("p", 2, 8, required_tier="tor"), [blocker]) is None


@st.composite
def clusters(draw):
    snap = snapshot(spines=1, leaves=draw(st.integers(1, 2)), tors=draw(st.integers(1, 2)),
                    nodes=draw(st.integers(1, 4)))
    names = [n.name for n in snap.nodes]
    gangs: list[RunningGang] = []
    free = {n: list(range(8)) for n in names}
    for index in range(draw(st.integers(0, 6))):
        width = draw(st.sampled_from([1, 2, 4, 8]))
        hosts = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        slots = []
        for host in hosts:
            if len(free[host]) >= width:
                slots.append((host, tuple(free[host][:width])))
                free[host] = free[host][width:]
        if slots:
            gangs.append(RunningGang(f"ns/g{index}", draw(st.integers(0, 3)), tuple(slots),
                                     draw(st.floats(0, 1e6))))
    occupied = _occupied(snap, gangs)
    candidates = [g for g in gangs if draw(st.booleans())]
    request = GangRequest("p", draw(st.integers(1, 6)), draw(st.sampled_from([2, 4, 8])),
                          required_tier=draw(st.sampled_from([None, "tor", "leaf"])))
    return occupied, request, candidates


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_plan_invariants(case):
    occupied, request, candidates = case
    assume(not solve(occupied, request).placed)  # preemption is asked only for a gang that does not fit
    plan = plan_preemption(occupied, request, candidates)
    if plan is None:
        # Complete: had every candidate touching some domain gone, the gang still would not fit there.
        if request.required_tier is not None:
            level = occupied.levels.index(request.required_tier)
            for domain in {occupied.levels.domain_of(n, level) for n in occupied.nodes}:
                nodes = frozenset(n.name for n in occupied.nodes if occupied.levels.domain_of(n, level) == domain)
                freed = occupied.only_nodes(nodes)
                for gang in candidates:
                    freed = freed.release(gang.slots)
                assert not solve(freed, request).placed
        return
    assert plan.victims, "a plan evicts someone"
    assert set(plan.victims) <= set(candidates)
    assert all(v.nodes & plan.nodes for v in plan.victims), "victims from inside the one domain"
    # Where it lands is in the domain and uses only GPUs free once the victims have gone.
    freed = occupied
    for victim in plan.victims:
        freed = freed.release(victim.slots)
    for replica in plan.placement.replicas:
        assert replica.node in plan.nodes
        assert not set(replica.gpus) & freed.used.get(replica.node, frozenset())
    # Minimal: without any one victim it does not fit in that domain.
    if len(plan.victims) > 1:
        for left_out in plan.victims:
            rest = occupied.only_nodes(plan.nodes)
            for victim in plan.victims:
                if victim is not left_out:
                    rest = rest.release(victim.slots)
            assert not solve(rest, request).placed


def test_an_elastic_gang_is_shrunk_towards_min_replicas_before_anyone_is_evicted_whole():
    snap = snapshot(leaves=1, tors=2, nodes=2)
    nodes = [n.name for n in snap.nodes]
    elastic = RunningGang("a/elastic", 0, tuple((n, tuple(range(8))) for n in nodes), 100.0, sizes=(2, 3))
    occupied = _occupied(snap, [elastic])
    plan = plan_preemption(occupied, GangRequest("p", 2, 8, required_tier="tor"), [elastic])
    assert plan is not None and len(plan.victims) == 1
    victim = plan.victims[0]
    assert victim.shrink_to == 2 and victim.nodes == plan.nodes, "it drops just its ranks in the cleared TOR"
    whole_only = RunningGang("a/rigid", 0, elastic.slots, 100.0)
    assert plan_preemption(occupied, GangRequest("p", 2, 8, required_tier="tor"), [whole_only]).victims[0] \
        .shrink_to is None
