"""The metrics published after every pass follow the jobs: every waiting reason a job can carry is
set while a job waits for it and back to 0 once no job does (a reason missing from the reset once left
`railyard_queue_oldest_wait_seconds{reason="NoReplacement"}` firing the pending alert for ever)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY
from railyard.operator.act.actor_context import Context
from railyard.operator.act.observe import Observer
from railyard.operator.base.reasons import WAITING_REASONS, JobState, PlacedReason
from railyard.operator.cache.state import ClusterState
from railyard.topology.api.timestamps import epoch

from tests.support.clock import ManualClock
from tests.support.fakeapi import FakeApi
from tests.support.jobs import make_job
from tests.support.settings import settings as operator_settings

CREATED = "2027-01-15T08:00:00Z"  # the clock below reads one hour later


def _job(name: str, reason: PlacedReason | None, status: str = "False", rv: int = 10) -> dict:
    body = make_job(name, 1)
    body["metadata"].update(namespace="default", uid=f"u-{name}", resourceVersion=str(rv), creationTimestamp=CREATED)
    if reason is not None:
        body["status"] = {"conditions": [{"type": "Placed", "status": status, "reason": reason,
                                          "message": "m", "lastTransitionTime": CREATED}]}
    return body


def _wait(reason: PlacedReason) -> float | None:
    return REGISTRY.get_sample_value("railyard_queue_oldest_wait_seconds", {"reason": reason})


@pytest.mark.parametrize("reason", WAITING_REASONS, ids=str)
def test_every_waiting_reason_is_published_then_reset_when_the_job_is_placed(reason: PlacedReason):
    state = ClusterState()
    clock = ManualClock(wall=epoch(CREATED, 0) + 3600)
    observer = Observer(Context(state, FakeApi([]), operator_settings(), clock))
    state.apply_job("ADDED", _job("waiter", None if reason == PlacedReason.NEW else reason))
    observer.observe(state.snapshot())
    assert _wait(reason) == pytest.approx(3600), f"a job waiting as {reason} is published"
    assert all(_wait(r) == 0 for r in WAITING_REASONS if r != reason)
    state.apply_job("MODIFIED", _job("waiter", PlacedReason.RELEASED, "True", rv=11))
    observer.observe(state.snapshot())
    assert {r: _wait(r) for r in WAITING_REASONS} == dict.fromkeys(WAITING_REASONS, 0.0)
    assert REGISTRY.get_sample_value("railyard_jobs", {"state": JobState.PLACED}) == 1
    assert REGISTRY.get_sample_value("railyard_jobs", {"state": JobState.QUEUED}) == 0


def test_a_jobs_series_follow_its_new_versions_and_stay_while_it_is_unchanged():
    from tests.support.harness import rig

    def job_state(state: str) -> float | None:
        return REGISTRY.get_sample_value("railyard_job_state", {"namespace": "default", "trainingjob": "series",
                                                                "state": state})

    r = rig(nodes=2)
    r.submit(make_job("series", 1))
    r.step()
    assert job_state("Placed") == 1
    r.running()
    r.step(2)  # unchanged passes: the series stays as published
    assert (job_state("Placed"), job_state("Running")) == (None, 1), "the new version's state, the old one gone"
    del r.api.objects["trainingjobs"][("default", "series")]
    r.state.apply_job("DELETED", {"metadata": {"namespace": "default", "name": "series"}})
    r.step()
    assert job_state("Running") is None, "a deleted job's series go"


def test_the_gauges_are_refreshed_at_most_every_publish_period():
    """A busy stream runs more than one pass a second; a scrape comes every 15 s or more."""
    from tests.support.harness import rig

    def jobs(state: JobState) -> float | None:
        return REGISTRY.get_sample_value("railyard_jobs", {"state": state})

    r = rig(nodes=2, publish_seconds=2.0)
    r.step()
    assert jobs(JobState.QUEUED) == 0 and jobs(JobState.PLACED) == 0, "the first pass publishes"
    r.submit(make_job("early", 1))
    r.step()
    assert jobs(JobState.PLACED) == 0, "within the period: not yet"
    r.clock.advance(2.0)
    r.step()
    assert jobs(JobState.PLACED) == 1, "the period over: the pass publishes what the state says"
