"""The queue's order (decide/queue.order): priority, then age; a small job that has waited past
RAILYARD_SMALL_JOB_AHEAD_SECONDS goes ahead of the larger jobs of its priority, never of a higher one."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st
from railyard.operator.decide.queue import QueuedJob, order
from railyard.topology.solver.request import GangRequest

NOW = 1000.0


def _job(name: str, priority: int, since: float, replicas: int) -> QueuedJob:
    return QueuedJob(("ns", name), priority, since, GangRequest(name, replicas, 8))


def _small(request: GangRequest) -> bool:
    return request.replicas * request.gpus_per_replica <= 16


def test_without_the_rule_priority_then_age():
    jobs = [_job("young", 0, 990, 1), _job("old-big", 0, 900, 16), _job("high", 5, 999, 16)]
    assert [j.key[1] for j in order(jobs, NOW)] == ["high", "old-big", "young"]


def test_a_small_job_past_the_ahead_seconds_goes_before_older_larger_jobs_of_its_priority_only():
    jobs = [_job("old-big", 0, 900, 16), _job("small-aged", 0, 980, 2), _job("small-fresh", 0, 995, 1),
            _job("high-big", 5, 999, 16)]
    names = [j.key[1] for j in order(jobs, NOW, _small, 10.0)]
    assert names == ["high-big", "small-aged", "old-big", "small-fresh"]


JOBS = st.lists(st.tuples(st.integers(0, 2), st.floats(0, NOW), st.sampled_from([1, 2, 4, 16])), max_size=12)


@given(JOBS, st.floats(0, 120))
def test_order_keeps_every_job_never_lets_a_lower_priority_ahead_and_keeps_age_order_in_each_group(rows, ahead):
    jobs = [_job(f"j{i}", p, since, r) for i, (p, since, r) in enumerate(rows)]
    out = order(jobs, NOW, _small, ahead)
    assert sorted(j.key for j in out) == sorted(j.key for j in jobs)
    assert [j.priority for j in out] == sorted((j.priority for j in out), reverse=True)

    def ahead_of_larger(j: QueuedJob) -> bool:
        return _small(j.request) and NOW - j.queued_since > ahead

    for a, b in pairwise(out):
        if a.priority == b.priority and ahead_of_larger(a) == ahead_of_larger(b):
            assert (a.queued_since, a.key) <= (b.queued_since, b.key)
        if a.priority == b.priority and ahead_of_larger(b):
            assert ahead_of_larger(a), "a small job past the ahead seconds is behind a job not so"
