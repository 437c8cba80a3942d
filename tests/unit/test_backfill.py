"""Backfill into starvation reservations on declared limits (decide/backfill.py), through the operator's own queue
pass on simulated time (bench/sim.py): a backfilled job never moves the holder's expected start, a job without a
limit never lands on reserved nodes, and with no limit declared the pass places exactly as before."""

from __future__ import annotations

from bench.sim import SimCluster, training_job
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from railyard.operator.base.settings import Settings
from railyard.operator.decide.backfill import NEVER, expected_start
from railyard.topology.solver.request import GangRequest

from tests.support.arrivals import in_arrival_order, submit_arrived
from tests.support.clusters import snapshot

# (replicas, GPUs per replica, lifetime seconds, limit over lifetime or None, arrival second)
JOB = st.tuples(st.sampled_from([1, 1, 1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.integers(20, 900),
                st.one_of(st.none(), st.floats(1.0, 4.0)), st.integers(0, 300))
# A busy cluster a whole-cluster gang starves on (its occupants declare limits, else its start is never), then small
# jobs: (GPUs, lifetime, limit factor or None, arrival)
OCCUPANT = st.tuples(st.integers(1, 7), st.integers(100, 900), st.floats(1.0, 3.0), st.just(0))
SMALL = st.tuples(st.integers(1, 4), st.integers(10, 300), st.one_of(st.none(), st.floats(1.0, 3.0)),
                  st.integers(15, 400))


def _cluster(starvation: float = 10.0, trust: float = 0.5) -> SimCluster:
    return SimCluster(snapshot(leaves=1, tors=2, nodes=4), Settings.of({"RAILYARD_STARVATION_SECONDS": starvation,
                                                                         "RAILYARD_BACKFILL_TRUST": trust}))


def _submit(sim: SimCluster, index: int, job: tuple, limits: bool = True) -> None:
    replicas, gpus, lifetime, factor, arrival = job
    limit = int(lifetime * factor) + 1 if factor is not None and limits else None
    body = training_job(f"j{index:03d}", replicas, gpus, required_tier="tor" if replicas > 1 else None,
                        time_limit=limit)
    sim.submit(body, float(lifetime), float(arrival))


def _requests(sim: SimCluster) -> dict:
    return {key: job.request for key, job in sim.jobs.items() if job.request is not None}


def _queued_before(sim: SimCluster, a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Whether `a` was created before `b` (every job here has the same class: the queue is first come first served)."""
    first, second = sim.jobs.get(a), sim.jobs.get(b)
    return first is not None and second is not None and first.created is not None and second.created is not None \
        and first.created < second.created


def _check_pass(sim: SimCluster, second: float) -> int:
    """One pass, and the rule's promises about it; the number of jobs it backfilled."""
    requests = _requests(sim)
    held_before = {key: memory.reserved for key, memory in sim.memory.items() if memory.reserved}
    plan = sim.step(second)
    now = sim.now + 1_800_000_000.0
    reserved = {key: memory.reserved for key, memory in sim.memory.items() if memory.reserved}
    for b in plan.backfilled:
        assert b.end <= b.start < NEVER, "a backfilled job ends before the holder could start"
        if b.holder in reserved and b.holder not in sim.running:
            after = expected_start(b.nodes, sim.occupants(), sim.current, requests[b.holder], now)
            assert after <= b.start, "the holder's expected start did not move"
    backfilled = {(b.job, b.holder) for b in plan.backfilled}
    for key, decision in plan.placed:
        assert decision.placement is not None
        nodes = {node for node, _ in decision.placement.allocations}
        for holder, held in reserved.items():
            # A reservation first made in this pass binds the jobs queued behind its holder, not one placed
            # ahead of it earlier in the pass (a starving job reserving a node the pass's first gang just took).
            if holder != key and nodes & held and (holder in held_before or _queued_before(sim, holder, key)):
                job = sim.jobs.get(key)
                assert job is not None and job.spec is not None and job.spec.time_limit_seconds is not None, \
                    "a job without a limit never uses another's reservation"
                assert (key, holder) in backfilled
    return len(backfilled)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(JOB, min_size=4, max_size=40), st.lists(st.tuples(st.integers(1, 8), st.integers(60, 600)),
                                                       min_size=1, max_size=3), st.sampled_from([0.5, 1.0]))
def test_a_backfilled_job_never_delays_the_holders_expected_start_and_unlimited_jobs_keep_off(jobs, large, trust):
    sim = _cluster(trust=trust)
    for i, (replicas, lifetime) in enumerate(large):  # gangs that starve: a whole TOR and more
        sim.submit(training_job(f"big{i}", 4 + replicas, 8, preferred_tier="tor"), float(lifetime), 0.0)
    pending = sorted(enumerate(jobs), key=lambda ij: ij[1][4])
    for second in range(0, 600, 2):
        while pending and pending[0][1][4] <= second:  # each job is created when it arrives
            _submit(sim, *pending.pop(0))
        if _check_pass(sim, float(second)):
            event("a job backfilled a reservation")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OCCUPANT, min_size=8, max_size=8), st.lists(SMALL, min_size=5, max_size=30),
       st.sampled_from([0.5, 1.0]))
def test_small_jobs_backfilling_a_whole_cluster_reservation_never_delay_it(occupants, small, trust):
    sim = _cluster(trust=trust)
    for i, (gpus, lifetime, factor, _) in enumerate(occupants):
        sim.submit(training_job(f"busy{i}", 1, gpus, time_limit=int(lifetime * factor) + 1), float(lifetime), 0.0)
    sim.submit(training_job("whole", 8, 8, preferred_tier="tor"), 600.0, 1.0)
    pending = in_arrival_order(small)
    for second in range(0, 1000, 2):
        submit_arrived(sim, pending, second)
        if _check_pass(sim, float(second)):
            event("a job backfilled a reservation")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(JOB, min_size=4, max_size=20))
def test_with_no_limit_declared_the_rule_is_never_asked_and_nothing_is_backfilled(jobs):
    sim = _cluster()
    for i, job in enumerate(jobs):
        _submit(sim, i, job, limits=False)
    for name in ("blocker-a", "blocker-b"):  # a TOR each, for 200 s: the big gang starves and reserves
        sim.submit(training_job(name, 4, 8, required_tier="tor"), 200.0, 0.0)
    sim.submit(training_job("big", 6, 8, preferred_tier="tor"), 300.0, 1.0)

    def never_listed() -> dict:
        raise AssertionError("occupants listed though no job declares a limit")

    sim.occupants = never_listed  # type: ignore[method-assign]
    reserving = 0
    for second in range(0, 300, 3):
        plan = sim.step(float(second))
        assert not plan.backfilled
        reserving += any(m.reserved for m in sim.memory.values())
    assert reserving, "a reservation was held: the rule had something to open"


def test_a_reservation_behind_a_job_that_never_ends_starts_never_and_one_behind_limits_when_they_end():
    snap = snapshot(leaves=1, tors=1, nodes=2)
    nodes = [n.name for n in snap.nodes]
    full = snap.allocate([(nodes[0], range(8)), (nodes[1], range(8))])
    request = GangRequest('big', 2, 8)
    assert expected_start(nodes, {nodes[0]: [(100.0, 8)], nodes[1]: [(NEVER, 8)]}, full, request, 0.0) == NEVER
    assert expected_start(nodes, {nodes[0]: [(100.0, 8)], nodes[1]: [(250.0, 4), (90.0, 4)]}, full, request,
                          0.0) == 250.0
    half = snap.allocate([(nodes[0], range(8))])
    assert expected_start(nodes, {nodes[0]: [(NEVER, 8)]}, half, GangRequest('one', 1, 8),
                          0.0) == 0.0, "room enough now"


def test_a_short_job_backfills_a_busy_reserved_node_and_neither_an_unlimited_job_nor_a_free_node_is_given():
    sim = _cluster(starvation=5.0)
    sim.submit(training_job("fill-a", 1, 4, time_limit=600), 600.0, 0.0)  # busy until its limit
    sim.submit(training_job("fill-b", 4, 8, required_tier="tor"), 600.0, 0.0)  # the other TOR, no limit
    sim.step(0.0)
    sim.submit(training_job("big", 4, 8, required_tier="tor"), 300.0, 1.0)
    for second in range(1, 12):
        sim.step(float(second))
    big = ("bench", "big")
    held = sim.memory[big].reserved
    assert len(held) == 4, "the big gang reserves the TOR fill-a is in"
    sim.submit(training_job("unlimited", 1, 4), 50.0, 12.0)
    sim.submit(training_job("short", 1, 4, time_limit=120), 50.0, 12.0)
    plan = sim.step(12.0)
    placed = {key[1]: d for key, d in plan.placed}
    assert "short" in placed and "unlimited" not in placed
    assert placed["short"].placement is not None
    (node, _), = placed["short"].placement.allocations
    fill_node = next(n for n, _ in sim.running[("bench", "fill-a")].slots)
    assert node == fill_node, "the busy node, beside fill-a: the free reserved nodes stay the holder's"
    assert [(b.job[1], b.holder[1]) for b in plan.backfilled] == [("short", "big")]
    assert sim.memory[big].reserved == held and sim.memory[big].backfilled_into, "the reservation stays put"


def test_a_kept_reservation_is_given_up_when_its_nodes_could_no_longer_hold_the_gang():
    from railyard.topology.solver.reservation import still_holds

    snap = snapshot(leaves=1, tors=1, nodes=4)
    nodes = frozenset(n.name for n in snap.nodes)
    assert still_holds(snap, GangRequest("big", 4, 8), nodes)
    assert not still_holds(snap, GangRequest("bigger", 5, 8), nodes), "the request grew past what they hold"
    assert not still_holds(snap.without_nodes(frozenset({min(nodes)})), GangRequest("big", 4, 8), nodes), \
        "a node is gone or unusable"
    selective = GangRequest("picky", 4, 8, pod_spec={"nodeSelector": {"nowhere": "true"}})
    assert not still_holds(snap, selective, nodes), "the template no longer fits them"


def test_a_job_that_would_end_after_the_holders_start_is_refused_even_where_the_node_stays_busy_longer():
    from railyard.operator.base.objects import parse_job
    from railyard.operator.decide.backfill import Backfill

    snap = snapshot(leaves=1, tors=1, nodes=2)
    a, b = (n.name for n in snap.nodes)
    busy = snap.allocate([(b, range(5))])  # b: 3 GPUs until t=100, 2 until t=1000 (declared)
    occupants = {b: [(100.0, 3), (1000.0, 2)]}
    holder = GangRequest("holder", 3, 4)  # two slots on a, one on b once 4 GPUs are free there: at t=100
    assert expected_start({a, b}, occupants, busy, holder, 0.0) == 100.0
    backfill = Backfill(lambda: occupants, 0.0, pass_seconds=5.0, trust=1.0)
    held = {("default", "holder"): frozenset({a, b})}
    late = parse_job(training_job("late", 1, 1, time_limit=400))  # ends ~440 s: b stays busy till 1000, but
    early = parse_job(training_job("early", 1, 1, time_limit=20))  # the holder could start at 100
    assert backfill.open_to(late, held, {("default", "holder"): holder}, busy) == {}
    opened = backfill.open_to(early, held, {("default", "holder"): holder}, busy)
    assert opened == {("default", "holder"): (100.0, frozenset({b}))}, "only the busy node, before the start"


def test_a_job_placed_earlier_in_the_pass_is_an_occupant_of_a_reservation_made_later_in_it():
    from railyard.operator.base.objects import parse_job
    from railyard.operator.decide.backfill import Backfill
    from railyard.topology.solver.placement import Decision, Placement

    snap = snapshot(leaves=1, tors=1, nodes=2)
    a, b = (n.name for n in snap.nodes)
    # Listed when the pass began: a busy until t=300 (declared); b free. The pass then places a 1x8 job on b with a
    # 100 s limit, and only after that does a gang of both nodes reserve them.
    listed = {a: [(300.0, 8)]}
    backfill = Backfill(lambda: listed, 0.0, pass_seconds=5.0, trust=1.0)
    first = parse_job(training_job("first", 1, 8, time_limit=100))
    on_b = Placement.from_replicas([(snap.node(b), range(8))], snap.levels)
    backfill.placed(first, Decision(GangRequest("first", 1, 8), on_b, None), {}, {})
    current = snap.allocate([(a, range(8)), (b, range(8))])
    holder, key, nodes = GangRequest("holder", 2, 8), ("default", "holder"), frozenset({a, b})
    late = parse_job(training_job("late", 1, 4, time_limit=10_000))
    assert backfill.would_delay(late, {key: holder}, current, key, nodes), \
        "the start is known (a at 300 s, first's end at 140 s): late would outlive it"
    assert expected_start({a, b}, backfill._occupants(), current, holder, 0.0) == 300.0
