"""Small jobs past starvation reservations (RAILYARD_SMALL_JOB_GPUS, decide/small_jobs.py), through the operator's
own queue pass on simulated time (bench/sim.py): off, a job without a limit keeps off reserved nodes; on, one of at
most that many GPUs may use them while an eighth of the holder's nodes or more are busy, and no larger one may; nor
one that would outlive a holder's start known from declared ends."""

from __future__ import annotations

from bench.sim import SimCluster, training_job
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from railyard.operator.base.settings import Settings
from railyard.operator.decide.backfill import NEVER, end_if_placed, expected_start
from railyard.operator.decide.pass_plan import PassInput
from railyard.operator.decide.priority import PriorityClassView
from railyard.operator.decide.small_jobs import Lent

from tests.support.arrivals import in_arrival_order, submit_arrived
from tests.support.clusters import nodes_in_tor, snapshot

BIG = ("bench", "big")


def _reserving(small_job_gpus: int, nodes: int, fillers: int, limits: tuple[int | None, ...] = ()) -> SimCluster:
    """Two TORs of `nodes` nodes: the second full for 600 s (no limit), `fillers` 1x8 jobs busy in the first (the
    i-th declaring `limits[i]`, none past the tuple); then a gang of the whole first TOR waits past the threshold
    and reserves it."""
    sim = SimCluster(snapshot(leaves=1, tors=2, nodes=nodes),
                     Settings.of({"RAILYARD_STARVATION_SECONDS": 5.0, "RAILYARD_SMALL_JOB_GPUS": small_job_gpus}))
    sim.submit(training_job("other-tor", nodes, 8, required_tier="tor"), 600.0, 0.0)
    for i in range(fillers):
        limit = limits[i] if i < len(limits) else None
        sim.submit(training_job(f"fill{i}", 1, 8, time_limit=limit), 600.0, 0.0)
    sim.step(0.0)
    sim.submit(training_job("big", nodes, 8, required_tier="tor"), 300.0, 1.0)
    for second in range(1, 12):
        sim.step(float(second))
    assert len(sim.memory[BIG].reserved) == nodes, "the big gang reserves the first TOR"
    return sim


def _placed_now(sim: SimCluster, *jobs: tuple[str, int, int]) -> dict[str, set[str]]:
    """Submit unlimited jobs (name, replicas, GPUs each) and run one pass: the nodes each placed job landed on."""
    for name, replicas, gpus in jobs:
        sim.submit(training_job(name, replicas, gpus), 50.0, 12.0)
    plan = sim.step(12.0)
    return {key[1]: {node for node, _ in d.placement.allocations} for key, d in plan.placed if d.placement}


def test_off_by_default_a_job_without_a_limit_keeps_off_reserved_nodes():
    assert Settings.of({}).placement.small_job_gpus == 0
    sim = _reserving(0, nodes=4, fillers=1)
    assert _placed_now(sim, ("small", 1, 4)) == {}


def test_on_a_small_job_uses_a_reserved_node_and_a_larger_one_still_waits():
    sim = _reserving(8, nodes=4, fillers=1)
    held = sim.memory[BIG].reserved
    placed = _placed_now(sim, ("larger", 2, 8), ("small", 1, 4))
    assert set(placed) == {"small"}, "2x8 asks 16 GPUs, over the 8 allowed"
    assert placed["small"] <= held


def test_a_small_job_on_reserved_nodes_is_reported_with_its_holder_and_one_beside_them_is_not():
    sim = _reserving(8, nodes=4, fillers=1)
    sim.submit(training_job("small", 1, 4), 50.0, 12.0)
    plan = sim.step(12.0)
    assert [key[1] for key, _ in plan.placed] == ["small"]
    assert plan.lent == [Lent(("bench", "small"), BIG)]
    # The other TOR full but for half a node: the small job packs there, off the reservation, and is not reported.
    empty = snapshot(leaves=1, tors=2, nodes=4)
    first, second = (nodes_in_tor(empty, tor) for tor in sorted({n.tor for n in empty.nodes}))
    used = {first[0]: list(range(8)), **{n: list(range(8)) for n in second[:-1]}, second[-1]: list(range(4))}
    beside = SimCluster(snapshot(used, leaves=1, tors=2, nodes=4),
                        Settings.of({"RAILYARD_STARVATION_SECONDS": 5.0, "RAILYARD_SMALL_JOB_GPUS": 8}))
    beside.submit(training_job("big", 4, 8, required_tier="tor"), 300.0, 1.0)
    for now in range(1, 12):
        beside.step(float(now))
    assert beside.memory[BIG].reserved == frozenset(first), "one busy node of four: open to small jobs"
    beside.submit(training_job("small", 1, 4), 50.0, 12.0)
    plan = beside.step(12.0)
    assert [(key[1], d.placement.allocations[0][0]) for key, d in plan.placed if d.placement] == [
        ("small", second[-1])]
    assert plan.lent == []


def test_a_holder_with_less_than_an_eighth_of_its_nodes_busy_is_closed_to_small_jobs():
    closed = _reserving(8, nodes=16, fillers=1)  # 1 of 16 busy
    assert _placed_now(closed, ("small", 1, 4)) == {}
    opened = _reserving(8, nodes=16, fillers=2)  # 2 of 16: an eighth
    placed = _placed_now(opened, ("small", 1, 4))
    assert placed["small"] <= opened.memory[BIG].reserved


def test_a_small_job_that_would_outlive_a_holders_start_known_from_declared_ends_keeps_off():
    known = _reserving(8, nodes=4, fillers=2, limits=(600, 400))  # the holder starts once both fillers' limits end
    held = known.memory[BIG].reserved
    assert _placed_now(known, ("unlimited", 1, 4)) == {}, "it could end after that start, or never"
    known.submit(training_job("too-long", 1, 4, time_limit=900), 50.0, 12.0)
    assert not known.step(12.0).placed, "its limit ends after the holder's expected start"
    known.submit(training_job("short", 1, 4, time_limit=120), 50.0, 13.0)
    plan = known.step(13.0)
    assert [(key[1], {n for n, _ in d.placement.allocations} <= held) for key, d in plan.placed if d.placement] == [
        ("short", True)], "it ends before the holder could start: lent the free reserved nodes"
    unknown = _reserving(8, nodes=4, fillers=2, limits=(600,))  # one filler never says when it ends
    placed = _placed_now(unknown, ("unlimited", 1, 4))
    assert placed["unlimited"] <= unknown.memory[BIG].reserved, "the holder's start is unknown: nothing to delay"


def test_a_job_placed_earlier_in_the_pass_counts_toward_the_start_of_a_reservation_taken_later_in_it():
    sim = SimCluster(snapshot(leaves=1, tors=2, nodes=4),
                     Settings.of({"RAILYARD_STARVATION_SECONDS": 5.0, "RAILYARD_SMALL_JOB_GPUS": 4}))
    sim.classes["high"] = PriorityClassView("high", 1000)
    sim.submit(training_job("other-tor", 4, 8, required_tier="tor"), 600.0, 0.0)
    sim.submit(training_job("fill", 1, 8, time_limit=600), 600.0, 0.0)
    sim.step(0.0)
    sim.submit(training_job("big", 4, 8, required_tier="tor"), 300.0, 1.0)
    for second in range(1, 7):
        sim.step(float(second))
    assert not sim.memory[BIG].reserved, "not starving yet"
    # The pass in which big starves: a higher-priority 1x8 with a limit goes first, on the TOR big then reserves.
    sim.submit(training_job("urgent", 1, 8, time_limit=100, priority_class="high"), 500.0, 7.0)
    sim.submit(training_job("unlimited", 1, 4), 500.0, 7.0)
    plan = sim.step(7.0)
    assert [key[1] for key, _ in plan.placed] == ["urgent"]
    urgent = plan.placed[0][1].placement
    assert urgent is not None and {node for node, _ in urgent.allocations} <= sim.memory[BIG].reserved
    assert plan.lent == [], "big's start is known (fill's and urgent's limits): the unlimited job keeps off"


def test_a_reservation_kept_for_a_backfilled_job_stays_closed_to_small_jobs():
    sim = SimCluster(snapshot(leaves=1, tors=2, nodes=4),
                     Settings.of({"RAILYARD_STARVATION_SECONDS": 5.0, "RAILYARD_SMALL_JOB_GPUS": 8}))
    sim.submit(training_job("other-tor", 4, 8, required_tier="tor"), 600.0, 0.0)
    sim.submit(training_job("fill", 1, 4, time_limit=600), 600.0, 0.0)  # half a node, until a declared end
    sim.step(0.0)
    sim.submit(training_job("big", 4, 8, required_tier="tor"), 300.0, 1.0)
    for second in range(1, 12):
        sim.step(float(second))
    held = sim.memory[BIG].reserved
    sim.submit(training_job("short", 1, 4, time_limit=120), 50.0, 12.0)
    plan = sim.step(12.0)
    assert [b.job[1] for b in plan.backfilled] == ["short"], "beside fill, on its declared end"
    assert plan.lent == [], "backfilled by its limit: its Event is Backfilled, not LentReservedNodes"
    assert sim.memory[BIG].reserved == held and sim.memory[BIG].backfilled_into
    sim.submit(training_job("small", 1, 4), 50.0, 13.0)
    assert not sim.step(13.0).placed, "a job without a limit would break the schedule the reservation keeps"


def test_a_small_job_does_not_make_room_on_reserved_nodes():
    sim = _reserving(8, nodes=4, fillers=1)
    # Every free node of the reserved TOR taken by small jobs: an urgent 1x8 finds no room but by evicting.
    for i in range(3):
        sim.submit(training_job(f"s{i}", 1, 8), 600.0, 12.0)
    placed = _placed_now(sim)
    assert len(placed) == 3
    held = sim.memory[BIG].reserved
    sim.classes["high"] = PriorityClassView("high", 1000)
    sim.submit(training_job("urgent", 1, 8, priority_class="high"), 50.0, 13.0)
    plan = sim.step(13.0)
    hold = plan.holds.get(("bench", "urgent"))
    assert hold is not None, "it makes room: the other TOR's gang is of lower priority"
    assert not hold.nodes & held and not any(v.startswith("bench/s") or v.startswith("bench/fill") for v in
                                              hold.victims), "making room stays off reserved nodes"


# (replicas, GPUs per replica, lifetime seconds, arrival second), none declaring a limit
JOB = st.tuples(st.sampled_from([1, 1, 1, 2, 4]), st.sampled_from([1, 2, 4, 8]), st.integers(20, 600),
                st.integers(0, 300))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(JOB, min_size=4, max_size=30), st.sampled_from([1, 2, 4, 8]))
def test_only_jobs_of_at_most_the_set_gpus_land_on_another_gangs_reservation(jobs, small_job_gpus):
    sim = SimCluster(snapshot(leaves=1, tors=2, nodes=4),
                     Settings.of({"RAILYARD_STARVATION_SECONDS": 10.0, "RAILYARD_SMALL_JOB_GPUS": small_job_gpus}))
    sim.submit(training_job("big", 6, 8, preferred_tier="tor"), 300.0, 1.0)  # more than a TOR: it starves
    asks: dict[str, int] = {}
    pending = sorted(enumerate(jobs), key=lambda ij: ij[1][3])
    for second in range(0, 600, 2):
        while pending and pending[0][1][3] <= second:
            i, (replicas, gpus, lifetime, arrival) = pending.pop(0)
            name = f"j{i:03d}"
            sim.submit(training_job(name, replicas, gpus, required_tier="tor" if replicas > 1 else None),
                       float(lifetime), float(arrival))
            asks[name] = replicas * gpus
        # Reservations held from before the pass and still after it: a reservation first taken in a pass binds
        # only the jobs behind its holder, and one given up in it may have been placed on.
        before = {key: m.reserved for key, m in sim.memory.items() if m.reserved}
        plan = sim.step(float(second))
        reserved = {key: m.reserved & before[key] for key, m in sim.memory.items() if m.reserved and key in before}
        for key, decision in plan.placed:
            assert decision.placement is not None
            nodes = {node for node, _ in decision.placement.allocations}
            if any(holder != key and nodes & held for holder, held in reserved.items()):
                assert key[1] != "big" and asks[key[1]] <= small_job_gpus, \
                    "only a job of at most RAILYARD_SMALL_JOB_GPUS uses another's reservation"
                event("a small job used a reservation")


def _freed_two_nodes(settings: dict[str, object]) -> set[str]:
    """One TOR of two nodes, both busy until 14 s; a 2x8 gang queued at 1 s and a 1x8 job at 2 s (small under
    RAILYARD_SMALL_JOB_GPUS=8); at 15 s the two nodes free: which jobs the pass places."""
    sim = SimCluster(snapshot(leaves=1, tors=1, nodes=2), Settings.of(settings))
    for i in range(2):
        sim.submit(training_job(f"fill{i}", 1, 8), 14.0, 0.0)
    sim.step(0.0)
    sim.submit(training_job("larger", 2, 8, required_tier="tor"), 600.0, 1.0)
    sim.submit(training_job("small", 1, 8), 600.0, 2.0)
    plan = sim.step(15.0)
    return {key[1] for key, d in plan.placed if d.placement}


def test_a_small_job_waiting_past_the_ahead_seconds_goes_before_an_older_larger_gang():
    assert _freed_two_nodes({}) == {"larger"}, "off by default: age order"
    assert _freed_two_nodes({"RAILYARD_SMALL_JOB_GPUS": 8}) == {"small"}, "waited 13 s, over the default 10 s"
    assert _freed_two_nodes({"RAILYARD_SMALL_JOB_GPUS": 8, "RAILYARD_SMALL_JOB_AHEAD_SECONDS": 20}) == {"larger"}
    assert _freed_two_nodes({"RAILYARD_SMALL_JOB_GPUS": 4}) == {"larger"}, "a 1x8 asks more than 4 GPUs"


# Busy 1-node occupants of the first TOR: (GPUs, lifetime, limit over lifetime or None); small jobs: (GPUs, lifetime,
# limit factor or None, arrival second)
OCCUPANT = st.tuples(st.integers(1, 8), st.integers(100, 600), st.one_of(st.none(), st.floats(1.0, 3.0)))
SMALL = st.tuples(st.integers(1, 8), st.integers(10, 300), st.one_of(st.none(), st.floats(1.0, 3.0)),
                  st.integers(0, 300))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OCCUPANT, min_size=1, max_size=4), st.lists(SMALL, min_size=3, max_size=25))
def test_a_job_lent_reserved_nodes_never_delays_a_holders_start_known_from_declared_ends(occupants, small):
    sim = SimCluster(snapshot(leaves=1, tors=2, nodes=4),
                     Settings.of({"RAILYARD_STARVATION_SECONDS": 10.0, "RAILYARD_SMALL_JOB_GPUS": 8}))
    sim.submit(training_job("other-tor", 4, 8, required_tier="tor"), 2000.0, 0.0)
    for i, (gpus, lifetime, factor) in enumerate(occupants):
        limit = int(lifetime * factor) + 1 if factor is not None else None
        sim.submit(training_job(f"busy{i}", 1, gpus, time_limit=limit), float(lifetime), 0.0)
    sim.submit(training_job("big", 4, 8, required_tier="tor"), 600.0, 1.0)
    began: dict[str, object] = {}
    given_before = sim.given

    def given() -> PassInput:  # what the pass sees when it begins: the snapshot and what occupies it
        began["input"], began["occupants"] = given_before(), sim.occupants()
        return began["input"]  # type: ignore[return-value]

    sim.given = given  # type: ignore[method-assign]
    pending = in_arrival_order(small)
    for second in range(0, 700, 2):
        submit_arrived(sim, pending, second)
        plan = sim.step(float(second))
        for lent in plan.lent:
            pass_input = began["input"]
            assert isinstance(pass_input, PassInput)
            memory = sim.memory.get(lent.holder)
            if lent.holder in sim.running or memory is None or not memory.reserved:
                continue  # the holder was placed later in the pass: nothing delayed
            request, held = pass_input.jobs[lent.holder].request, memory.reserved
            assert request is not None
            start = expected_start(held, began["occupants"], pass_input.snapshot, request,  # type: ignore[arg-type]
                                   pass_input.now)
            end = end_if_placed(pass_input.jobs[lent.job], pass_input.now, sim.settings.placement.resync_seconds)
            assert start == NEVER or end <= start, "a lent job ends before a start known when the pass began"
            event("a small job was lent reserved nodes" + (" (start known)" if start < NEVER else ""))
