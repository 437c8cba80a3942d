"""Goodput accounting (decide/goodput_ledger.py): every second of wall time since the gang first ran is either
productive or lost to exactly one cause; a fault's timeline lands in the causes a platform team reads;
and the operator keeps the ledger in status.goodput from the ranks' reports."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.operator.decide import goodput_ledger as goodput
from railyard.operator.decide.goodput_ledger import Activity
from railyard.operator.decide.reports import WorkerReport

from tests.support.harness import rig
from tests.support.jobs import make_job

observations = st.lists(st.tuples(
    st.floats(min_value=0.0, max_value=120.0), st.sampled_from(list(Activity)), st.booleans(),
    st.one_of(st.none(), st.integers(min_value=0, max_value=10_000)), st.booleans(),
    st.one_of(st.none(), st.integers(min_value=0, max_value=10_000)),
    st.one_of(st.none(), st.floats(min_value=0.0, max_value=30.0))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(observations, st.sampled_from([0.0, 5.0, 60.0]))
def test_productive_and_lost_time_add_up_to_the_wall_time_and_never_go_negative(steps, quiet):
    ledger = goodput.start(1000.0, 0)
    now, attempt = 1000.0, 0
    for dt, activity, new_attempt, step, restart, first_step, step_seconds in steps:
        now += dt
        attempt += int(new_attempt)
        if restart:
            ledger = goodput.restarted(ledger, now - dt / 2, now - dt / 3, quiet)
        ledger = goodput.observe(ledger, now, activity, attempt, step, first_step, step_seconds, quiet)
        assert ledger.at <= now and (ledger.at == now or ledger.stalled_since is None)
        parts = [ledger.productive, *ledger.lost_by_cause().values()]
        assert all(p >= -1e-9 for p in parts)
        assert math.isclose(sum(parts), ledger.wall, rel_tol=1e-9, abs_tol=1e-6)
        assert ledger.best_step >= (ledger.step or 0)
        assert ledger.ratio is None or 0.0 <= ledger.ratio <= 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.05, max_value=5.0), min_size=2, max_size=80),
       st.lists(st.floats(min_value=0.05, max_value=5.0), min_size=2, max_size=80))
def test_ranks_that_report_every_few_seconds_are_never_counted_stalled_between_their_reports(report_gaps, flush_gaps):
    """Ranks step without pause and report every <= 5 s; the operator flushes every <= 5 s, unaligned. A flush that saw
    no new report is no stall: every second is productive (the quiet spell waits for the next report)."""
    reports = [sum(report_gaps[:i + 1]) for i in range(len(report_gaps))]
    ledger, step = goodput.start(0.0, 0), 0
    now = 0.0
    for gap in flush_gaps:
        now += gap
        if now > reports[-1]:
            break
        step = sum(1 for r in reports if r <= now)  # one new step a report
        ledger = goodput.observe(ledger, now, Activity.RUNNING, 0, step, quiet_seconds=5.0 + 5.0)
    assert ledger.stalled == 0 and math.isclose(ledger.productive, ledger.wall), ledger


def test_a_quiet_spell_longer_than_the_report_cadence_was_a_stall_from_its_start_and_a_restart_ends_it():
    ledger = goodput.start(0.0, 0)
    ledger = goodput.observe(ledger, 10.0, Activity.RUNNING, 0, 10, quiet_seconds=6.0)
    ledger = goodput.observe(ledger, 14.0, Activity.RUNNING, 0, 10, quiet_seconds=6.0)  # quiet 4 s: not yet known
    assert (ledger.at, ledger.stalled) == (10.0, 0.0)
    ledger = goodput.observe(ledger, 17.0, Activity.RUNNING, 0, 10, quiet_seconds=6.0)  # 7 s: a stall since 10
    assert (ledger.at, ledger.stalled, ledger.stalled_since) == (17.0, 7.0, 10.0)
    # A fault seen at 21 s, restart decided at 22 s, 3 s after a quiet spell began at 19 s: stall, then detection.
    ledger = goodput.observe(ledger, 19.0, Activity.RUNNING, 0, 12, quiet_seconds=6.0)
    ledger = goodput.restarted(ledger, detected=21.0, decided=22.0, quiet_seconds=6.0)
    ledger = goodput.observe(ledger, 25.0, Activity.WAITING, 1, None, quiet_seconds=6.0)
    assert (ledger.stalled, ledger.detection, ledger.capacity) == (7.0 + 2.0, 1.0, 3.0), ledger
    assert math.isclose(ledger.productive + ledger.lost, ledger.wall)


def test_an_attempts_first_interval_counts_its_steps_at_the_jobs_step_time_and_the_rest_as_start_up():
    ledger = goodput.start(0.0, 90)
    ledger = goodput.observe(ledger, 10.0, Activity.RUNNING, 0, 100)  # 10 s of work: steps 91..100
    ledger = goodput.observe(ledger, 20.0, Activity.STARTING, 1, None)  # restarted, resuming at 90
    ledger = goodput.observe(ledger, 30.0, Activity.RUNNING, 1, 105, first_step=91, step_seconds=0.5)
    # 15 steps (91..105) at 0.5 s: 7.5 s of work, 5 of it above the best step 100; 2.5 s start-up.
    assert math.isclose(ledger.productive, 10 + 7.5 * 5 / 15) and math.isclose(ledger.recompute, 7.5 * 10 / 15)
    assert math.isclose(ledger.restart, 10 + 2.5)


def test_a_fault_timeline_is_split_into_detection_capacity_restart_and_recompute():
    t0 = 1_000.0
    ledger = goodput.start(t0, 0)
    ledger = goodput.observe(ledger, t0 + 100, Activity.RUNNING, 0, 100)  # 100 s, 100 new steps
    ledger = goodput.observe(ledger, t0 + 110, Activity.RUNNING, 0, 100)  # a GPU hangs: 10 s, no step
    ledger = goodput.restarted(ledger, detected=t0 + 105, decided=t0 + 110)  # seen at 105, decided at 110
    ledger = goodput.observe(ledger, t0 + 130, Activity.WAITING, 1, None)  # 20 s: replacement binding
    ledger = goodput.observe(ledger, t0 + 145, Activity.STARTING, 1, None)  # 15 s: start-up, NCCL, load
    ledger = goodput.observe(ledger, t0 + 146, Activity.RUNNING, 1, 61)  # first report: resumed at 60
    ledger = goodput.observe(ledger, t0 + 185, Activity.RUNNING, 1, 100)  # 39 s re-doing steps 61..100
    ledger = goodput.observe(ledger, t0 + 195, Activity.RUNNING, 1, 110)  # 10 s of new steps
    assert ledger.productive == 110
    assert ledger.lost_by_cause() == {"detection": 5, "stalled": 5, "capacity": 20, "restart": 16, "recompute": 39}
    assert ledger.ratio == round(110 / 195, 4)
    back = goodput.from_status(goodput.to_status(ledger))
    assert (back.productive, back.recompute, back.best_step, back.attempt) == (110, 39, 110, 1)


def test_the_operator_keeps_status_goodput_from_the_ranks_reports():
    r = rig(nodes=4)
    r.submit(make_job("measured", 2, checkpoint={"path": "/c"}))
    r.running()

    def report(step: int) -> None:
        for rank in (0, 1):
            r.loop.book.record(WorkerReport.model_validate({
                "namespace": "default", "job": "measured", "rank": rank, "restartCount": 0, "step": step}),
                r.clock.time())

    report(10)
    r.step()
    for step in range(20, 120, 10):
        r.clock.advance(10)
        report(step)
        r.step()
    status = r.status("measured")["goodput"]  # written every RAILYARD_GOODPUT_WRITE_SECONDS (30 s)
    assert status["productiveSeconds"] >= 70 and status["ratio"] > 0.95, status
    assert status["bestStep"] >= 80 and status["attempt"] == 0
    assert r.loop.ctx.memories.recall(r.state.jobs[("default", "measured")]).goodput.productive == 100
    from railyard.operator.base import metrics
    assert metrics.JOB_GOODPUT.labels("default", "measured")._value.get() == 1.0


def test_the_stall_before_a_restart_decision_counts_as_detection_from_when_the_fault_was_seen():
    from tests.support.nodes import update_node

    r = rig(nodes=4)
    r.submit(make_job("hit", 2, checkpoint={"path": "/c"}))
    r.running()

    def report(step: int) -> None:
        restart = r.status("hit").get("restartCount", 0)
        for rank in (0, 1):
            r.loop.book.record(WorkerReport.model_validate({
                "namespace": "default", "job": "hit", "rank": rank, "restartCount": restart, "step": step}),
                r.clock.time())

    for step in range(0, 50, 10):
        report(step)
        r.step()
        r.clock.advance(10)
    r.clock.advance(20)  # the gang stalls at t=40; the GPU's health monitor flags it at t=55
    r.step()
    node = r.nodes_of("hit")[0]
    flagged = datetime.fromtimestamp(r.clock.time() - 15, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def gpu_fault(obj: dict) -> None:
        obj["status"]["conditions"].append({"type": "GpuMemWatch", "status": "True", "message": "XID 48",
                                            "lastTransitionTime": flagged})

    update_node(r.api, r.state, node, gpu_fault)
    r.step()
    assert r.status("hit")["restartCount"] == 1
    r.clock.advance(6)  # the next report flush (RAILYARD_REPORT_FLUSH_SECONDS) accounts it
    r.step()
    ledger = r.loop.ctx.memories.recall(r.state.jobs[("default", "hit")]).goodput
    assert ledger.productive == 40 and ledger.detection == 15 and ledger.stalled == 15, ledger
    assert ledger.stalled_since is None
    assert math.isclose(sum(ledger.lost_by_cause().values()) + ledger.productive, ledger.wall)


def test_a_report_without_a_step_is_no_step_zero_and_a_resumed_attempt_recomputes_nothing():
    """After a restart resuming at step 100, the new attempt's ranks first report with no step (their save-on-fault
    poll, a supervisor), then steps 101..: none of that is recomputed work."""
    r = rig(nodes=4, report_url="https://reports.example:8090/v1/reports")
    r.submit(make_job("resumed", 2, checkpoint={"path": "/c"}))
    r.running()

    def report(step: int | None, attempt: int) -> None:
        for rank in (0, 1):
            r.loop.book.record(WorkerReport.model_validate({
                "namespace": "default", "job": "resumed", "rank": rank, "restartCount": attempt, "step": step,
                "checkpoints": [{"step": 100, "path": "/c/100"}]}), r.clock.time())

    for step in (90, 100):
        report(step, 0)
        r.step()
        r.clock.advance(10)
    node = r.nodes_of("resumed")[0]
    r.api._remove("nodes", ("", node))
    r.deliver()
    r.step(2)
    assert r.status("resumed")["restartCount"] == 1 and r.status("resumed")["lastRestart"]["resumeStep"] == 100
    r.api.bind_released()
    r.deliver()
    r.step()
    for step in (None, 101, 111, 121):
        r.clock.advance(5)
        report(step, 1)
        r.step()
    ledger = r.loop.ctx.memories.recall(r.state.jobs[("default", "resumed")]).goodput
    assert ledger.attempt == 1 and ledger.step == 121
    assert ledger.recompute == 0, ledger
