"""The living-cluster run's pure half: the stream's demand and shapes, and the figures read from pod
bound/finished times (hack/bench/peers/compare_living.py runs it on the rig)."""

from __future__ import annotations

import statistics

from bench.peers.living import (
    SIZE_CLASSES,
    arrival_rate,
    busy_gpus,
    living_figures,
    living_stream,
    mean_busy,
    mean_job_gpus,
    settled_percentile,
    size_class,
)
from bench.peers.translators import (
    LIFETIME_ANNOTATION,
    PeerJob,
    kueue_objects,
    railyard_jobset_objects,
    railyard_objects,
    volcano_objects,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.api.job import TrainingJob
from railyard.topology.cluster.workload_intent import TIME_LIMIT


def test_the_stream_asks_the_load_it_is_given_in_steady_demand():
    seconds, lifetime = 20_000, 300.0
    jobs = living_stream(seconds, 3, 16_384, load=1.1, mean_lifetime=lifetime)
    arrivals = [j.arrival for j in jobs]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0 and arrivals[-1] < seconds
    # Little's law: GPUs asked in steady state = rate x GPUs per job x lifetime, within sampling noise.
    demand = sum(j.replicas * j.gpus * j.lifetime for j in jobs) / seconds
    assert 0.9 * 1.1 * 16_384 < demand < 1.1 * 1.1 * 16_384, demand
    assert abs(statistics.fmean(j.lifetime for j in jobs) / lifetime - 1) < 0.1
    assert abs(len(jobs) / seconds / arrival_rate(16_384, 1.1, lifetime) - 1) < 0.05
    assert living_stream(600, 3, 16_384) == living_stream(600, 3, 16_384)  # seeded


def test_gangs_up_to_16_replicas_require_a_tor_and_larger_prefer_one():
    for job in living_stream(3_000, 5, 16_384):
        if 1 < job.replicas <= 16:
            assert (job.required_tier, job.preferred_tier) == ("tor", None)
        else:
            assert (job.required_tier, job.preferred_tier) == (None, "tor")


def test_every_peer_gives_its_pods_the_jobs_lifetime():
    job = PeerJob("l0001-4x8", 4, 8, "tor", None, arrival=1.0, lifetime=123.4)
    [tj] = railyard_objects(job)
    assert tj["spec"]["template"]["metadata"]["annotations"] == {LIFETIME_ANNOTATION: "123s"}
    [kjob] = kueue_objects(job)
    assert kjob["spec"]["template"]["metadata"]["annotations"][LIFETIME_ANNOTATION] == "123s"
    [vjob] = volcano_objects(job)
    assert vjob["spec"]["tasks"][0]["template"]["metadata"]["annotations"] == {LIFETIME_ANNOTATION: "123s"}
    [burst] = railyard_objects(PeerJob("j", 4, 8, "tor", None))
    assert burst["spec"]["template"]["metadata"]["annotations"] == {}  # the burst's pods run forever


def test_a_declared_limit_reaches_railyard_as_its_field_and_no_other_peer_is_sent_one():
    job = PeerJob("l0002-2x8", 2, 8, "tor", None, arrival=1.0, lifetime=100.0, time_limit=240)
    [tj] = railyard_objects(job)
    parsed = TrainingJob.model_validate({**tj, "metadata": {**tj["metadata"], "namespace": "bench"}})
    assert parsed.spec.time_limit_seconds == 240
    [jobset] = railyard_jobset_objects(job)
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["metadata"]["annotations"][TIME_LIMIT] == "240"
    assert "240" not in repr(kueue_objects(job)) and "240" not in repr(volcano_objects(job))
    [unlimited] = railyard_objects(PeerJob("l0003-2x8", 2, 8, "tor", None, lifetime=100.0))
    assert "timeLimitSeconds" not in unlimited["spec"]


def test_the_compare_stream_with_limits_is_the_same_work_with_declarations_around_each_lifetime():
    from bench.peers.compare_living import the_stream

    plain, limited = the_stream(11, 0.0), the_stream(11, 0.5)
    assert all(j.time_limit is None for j in plain)
    assert [(j.name, j.arrival, j.lifetime) for j in plain] == [(j.name, j.arrival, j.lifetime) for j in limited]
    declaring = [j for j in limited if j.time_limit is not None]
    assert 0.4 < len(declaring) / len(limited) < 0.6
    # Whole minutes, never under the lifetime: no job of the stream is ended by its own limit.
    assert all(j.time_limit % 60 == 0 and j.time_limit >= j.lifetime for j in declaring)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.one_of(st.none(), st.floats(0, 100)), st.integers(1, 8)),
                max_size=30), st.floats(1, 200), st.floats(0.5, 20))
def test_busy_gpus_counts_exactly_the_pods_holding_gpus_at_each_sample(pods, end, step):
    intervals = [(start, None if stop is None else start + stop, gpus) for start, stop, gpus in pods]
    for t, held in busy_gpus(intervals, end, step):
        assert held == sum(g for start, stop, g in intervals if start <= t and (stop is None or stop > t))


def test_waits_are_per_size_class_and_jobs_still_waiting_are_counted_not_dropped():
    jobs = [PeerJob("a-1x8", 1, 8, None, "tor", 0.0, 50), PeerJob("b-4x8", 4, 8, "tor", None, 1.0, 50),
            PeerJob("c-64x8", 64, 8, None, "tor", 2.0, 50)]
    submitted = {"a-1x8": 0.0, "b-4x8": 1.0, "c-64x8": 2.0}
    bound = {"a-0": 3.0, **{f"b-{i}": 2.0 + i for i in range(4)}, "c-0": 4.0}
    job_of = {"a-0": "a-1x8", **{f"b-{i}": "b-4x8" for i in range(4)}, "c-0": "c-64x8"}
    figures = living_figures(jobs, submitted, bound, {"a-0": 20.0}, job_of, cluster_gpus=64, end=30.0, step=10)
    small, medium, large = (figures["waits_by_size"][name] for name, _, _ in SIZE_CLASSES)
    assert (small["placed"], small["wait_p50_seconds"]) == (1, 3.0)
    assert (medium["placed"], medium["wait_p50_seconds"]) == (1, 4.0)  # submit 1.0 -> last replica 5.0
    assert (large["placed"], large["unplaced_at_end"], large["wait_p99_censored_seconds"]) == (0, 1, 28.0)
    assert figures["gangs_partly_bound_at_end"] == 1  # c: 1 of 64 bound
    # Every job together: a (3.0) and b (4.0) placed; c still waiting 28.0 s at the end.
    assert figures["all_jobs"] == {"placed": 2, "unplaced_at_end": 1, "observed_seconds_after_arrivals": 0.0,
                                   "wait_p50_seconds": 3.0, "wait_p99_seconds": 4.0,
                                   "wait_p99_censored_seconds": 28.0, "wait_p99_settled_seconds": None,
                                   "wait_p99_placed_by_arrivals_end_seconds": 4.0,
                                   "unplaced_when_arrivals_stopped": 1}
    assert figures["job_times"] == {"a-1x8": [1, 0.0, 3.0], "b-4x8": [4, 1.0, 5.0], "c-64x8": [64, 2.0, None]}
    assert figures["gpus_held_over_time"] == [(0.0, 0), (10.0, 8 + 32 + 8), (20.0, 32 + 8)]
    assert [size_class(j) for j in jobs] == [name for name, _, _ in SIZE_CLASSES]
    assert mean_job_gpus() > 8


def test_jobs_placed_after_the_arrivals_stop_count_with_their_wait_and_the_window_figures_do_not_move():
    jobs = [PeerJob("a-1x8", 1, 8, None, "tor", 0.0, 50), PeerJob("c-2x8", 2, 8, "tor", None, 2.0, 50)]
    submitted = {"a-1x8": 0.0, "c-2x8": 2.0, "late-1x8": 31.0}  # late: after the window, not in the cohort
    bound = {"a-0": 3.0, "c-0": 4.0, "c-1": 52.0, "late-0": 32.0}
    job_of = {"a-0": "a-1x8", "c-0": "c-2x8", "c-1": "c-2x8", "late-0": "late-1x8"}
    window = living_figures(jobs, submitted, bound, {}, job_of, cluster_gpus=64, end=30.0, step=10)
    observed = living_figures(jobs, submitted, bound, {}, job_of, cluster_gpus=64, end=30.0, step=10,
                              observed_until=60.0)
    assert window["all_jobs"]["unplaced_at_end"] == 1 and window["all_jobs"]["wait_p99_settled_seconds"] is None
    assert observed["all_jobs"]["placed"] == 2 and observed["all_jobs"]["unplaced_at_end"] == 0
    assert observed["all_jobs"]["wait_p99_settled_seconds"] == 50.0  # c: submit 2.0 -> second replica 52.0
    assert observed["all_jobs"]["wait_p99_placed_by_arrivals_end_seconds"] == 3.0
    assert observed["all_jobs"]["unplaced_when_arrivals_stopped"] == 1
    assert observed["job_times"] == {"a-1x8": [1, 0.0, 3.0], "c-2x8": [2, 2.0, 52.0]}
    for key in ("gpus_held_over_time", "pods_bound", "pods_bound_per_second", "gpu_utilisation_mean"):
        assert observed[key] == window[key], key  # the window's figures: pods bound by 30.0 (a-0, c-0)
    assert observed["pods_bound"] == 2 and observed["jobs_submitted"] == 2


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 500), max_size=40), st.lists(st.tuples(st.floats(0, 500), st.floats(0, 500)),
                                                          max_size=10), st.sampled_from([50, 90, 99]))
def test_a_settled_percentile_is_what_every_outcome_of_the_jobs_still_waiting_gives(waits, waiting, p):
    """However long each waiting job still waits (at least its wait so far), the percentile is the same."""
    so_far = [w for w, _ in waiting]
    settled = settled_percentile(waits, so_far, p)
    if settled is None:
        return
    for outcome in ([w for w, _ in waiting], [w + extra for w, extra in waiting], [w + 1e6 for w, _ in waiting]):
        every = sorted(waits + outcome)
        assert round(every[min(len(every) - 1, round(p / 100 * (len(every) - 1)))], 2) == settled


def test_a_percentile_with_too_many_jobs_still_waiting_is_not_settled():
    assert settled_percentile([1.0] * 98, [5.0, 6.0], 99) is None  # rank 98 falls on a waiting job
    assert settled_percentile([1.0] * 99 + [9.0], [10.0], 99) == 9.0  # the waiting job ranks above it
    assert settled_percentile([1.0] * 99 + [9.0], [8.0], 99) is None  # it could still end below 9.0
    assert settled_percentile([], [], 99) is None


def test_a_pods_gpus_held_before_it_runs_and_past_its_lifetime_are_reported_apart():
    jobs = [PeerJob("a-1x8", 1, 8, None, "tor", 0.0, 50), PeerJob("b-1x8", 1, 8, None, "tor", 0.0, 20)]
    submitted = {"a-1x8": 0.0, "b-1x8": 0.0}
    bound, running = {"a-0": 1.0, "b-0": 2.0}, {"a-0": 4.0, "b-0": 3.0}
    finished = {"a-0": 56.0, "b-0": 23.5}  # a: 2 s past its 50 s; b: 0.5 s past its 20 s
    job_of = {"a-0": "a-1x8", "b-0": "b-1x8"}
    figures = living_figures(jobs, submitted, bound, finished, job_of, cluster_gpus=16, end=60.0, step=10,
                             running=running)
    assert figures["pod_bound_to_running_seconds"] == {"p50": 1.0, "p99": 3.0, "mean": 2.0}
    assert figures["pod_running_past_lifetime_seconds"] == {"p50": 0.5, "p99": 2.0, "mean": 1.25}
    # Samples at 0, 10, ..., 50: bound counts a from 1.0 and b from 2.0; running from 4.0 and 3.0.
    assert figures["gpus_held_over_time"][:3] == [(0.0, 0), (10.0, 16), (20.0, 16)]
    # Held from bound: a 1..56 and b 2..23.5 over 60 s; from Running: a 4..56, b 3..23.5.
    assert figures["gpu_utilisation_mean"] == round((55 + 21.5) * 8 / 60 / 16, 4)
    assert figures["gpu_utilisation_running_mean"] == round((52 + 20.5) * 8 / 60 / 16, 4)
    # Work: a from 4 for its 50 s, b from 3 for its 20 s (neither finished early).
    assert figures["gpu_utilisation_work_mean"] == round((50 + 20) * 8 / 60 / 16, 4)
    # warm-up 0 here: from the run's start it is the same figure
    assert figures["gpu_utilisation_work_whole_run_mean"] == figures["gpu_utilisation_work_mean"]
    assert "pod_bound_to_running_seconds" not in living_figures(jobs, submitted, bound, finished, job_of, 16, 60.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.one_of(st.none(), st.floats(0, 100)), st.integers(1, 8)),
                min_size=1, max_size=20), st.floats(0, 50), st.floats(60, 200))
def test_the_mean_utilisation_is_the_time_average_not_a_sample_of_it(pods, start, end):
    intervals = [(begin, None if length is None else begin + length, gpus) for begin, length, gpus in pods]
    # A fine sampling converges on the exact average; 10 s samples need not (the seed-12 runs were ~1 % off).
    fine = statistics.fmean(held for t, held in busy_gpus(intervals, end, 0.01) if t >= start)
    assert abs(mean_busy(intervals, start, end, 1) - fine) <= 0.01 * sum(g for _, _, g in intervals) + 1e-3


def test_a_gang_works_from_when_its_last_replica_runs_until_each_pods_lifetime_ends():
    jobs = [PeerJob("g-2x8", 2, 8, None, "tor", 0.0, 30), PeerJob("h-2x8", 2, 8, None, "tor", 0.0, 30)]
    submitted = {"g-2x8": 0.0, "h-2x8": 0.0}
    job_of = {"g-0": "g-2x8", "g-1": "g-2x8", "h-0": "h-2x8", "h-1": "h-2x8"}
    bound = {"g-0": 1.0, "g-1": 1.0, "h-0": 1.0, "h-1": 1.0}
    # g's second rank runs 5 s after its first; g-0 finishes 2 s past its lifetime; h-1 never runs.
    running = {"g-0": 2.0, "g-1": 7.0, "h-0": 2.0}
    finished = {"g-0": 34.0, "g-1": 36.0}
    figures = living_figures(jobs, submitted, bound, finished, job_of, cluster_gpus=32, end=60.0, step=10,
                             running=running)
    # g-0 works 7..32 (its lifetime ends at 32), g-1 7..36 (finished before 37); h holds GPUs and works none.
    assert figures["gpu_utilisation_work_mean"] == round((25 + 29) * 8 / 60 / 32, 4)
    assert figures["gpu_utilisation_running_mean"] > figures["gpu_utilisation_work_mean"]
    late = living_figures(jobs, submitted, bound, finished, job_of, cluster_gpus=32, end=60.0, step=10,
                          running=running, warmup=10.0)
    # After a 10 s warm-up: g-0 10..32 and g-1 10..36 over 50 s; from the start, the same work over 60 s.
    assert late["gpu_utilisation_work_mean"] == round((22 + 26) * 8 / 50 / 32, 4)
    assert late["gpu_utilisation_work_whole_run_mean"] == figures["gpu_utilisation_work_mean"]
    # Held from bound: g 1..34 and 1..36, h 1..60 twice (h-1 never runs, h-0 never finishes); the warm-up
    # moves the held figure's window to 10..60 and leaves the one from the start alone.
    assert late["gpu_utilisation_mean"] == round((24 + 26 + 50 + 50) * 8 / 50 / 32, 4)
    assert late["gpu_utilisation_whole_run_mean"] == round((33 + 35 + 59 + 59) * 8 / 60 / 32, 4)
    assert late["gpu_utilisation_whole_run_mean"] == figures["gpu_utilisation_mean"]
