"""A released gang's Placed=Released goes out with its Running (one status write instead of two) when it
runs within RAILYARD_RELEASE_RECORD_SECONDS, else on its own then; the release is timed from when it
happened either way, and a successor that finds it unrecorded finishes it."""

from __future__ import annotations

import asyncio
import copy

from railyard.operator.act.loop import PlacementLoop
from railyard.topology.api.timestamps import epoch

from tests.support.harness import rig
from tests.support.jobs import make_job
from tests.support.nodes import not_ready


def _status_writes(r, name: str) -> int:
    return sum(1 for verb, what in r.api.writes if what == f"trainingjobs/{name}/status")


def test_a_gang_that_runs_at_once_is_recorded_released_and_running_in_one_write():
    r = rig(nodes=4, release_record_seconds=10)
    r.submit(make_job("quick", 2))
    r.step()
    assert r.reason("quick") == "Placing" and not any(
        p["spec"].get("schedulingGates") for p in r.api.objects["pods"].values()), "released, not yet recorded"
    released = r.clock.time()
    r.clock.advance(2)
    r.api.bind_released()
    r.deliver()
    r.step()
    assert r.reason("quick") == "Released" and r.reason("quick", "Running") == "AllRunning"
    assert epoch(r.status("quick")["placement"]["releasedAt"], 0) == released, "timed from the release itself"
    assert _status_writes(r, "quick") == 2, "Placing, then Released with Running"
    r.step(2)
    assert _status_writes(r, "quick") == 2


def test_a_gang_not_running_soon_is_recorded_released_on_its_own():
    r = rig(nodes=4, release_record_seconds=10, bind_timeout_seconds=60)
    r.submit(make_job("slow", 2))
    r.step()
    r.clock.advance(5)
    r.step()
    assert r.reason("slow") == "Placing"
    r.clock.advance(5)
    r.step()
    assert r.reason("slow") == "Released" and r.condition("slow", "Running") is None
    r.api.bind_released()
    r.deliver()
    r.step()
    assert r.reason("slow", "Running") == "AllRunning" and _status_writes(r, "slow") == 3


def test_an_unrecorded_release_still_times_out_unbound_pods():
    r = rig(nodes=4, release_record_seconds=1e9, bind_timeout_seconds=30)
    r.submit(make_job("stuck", 2))
    r.step()
    r.clock.advance(31)
    r.step(2)  # the release is recorded first, then the gang rolled back
    assert r.reason("stuck") == "BindTimeout", "the release counts from when it happened, recorded or not"


def test_a_restart_is_over_with_the_write_that_says_running():
    r = rig(nodes=4, release_record_seconds=10)
    r.submit(make_job("gang", 2))
    r.step()
    r.api.bind_released()
    r.deliver()
    r.step()
    not_ready(r.api, r.state, r.nodes_of("gang")[1])
    r.step()
    r.pods_gone()
    r.step(2)
    assert r.condition("gang", "Restarting")["status"] == "True"
    before = _status_writes(r, "gang")
    r.api.bind_released()
    r.deliver()
    r.step()
    assert r.condition("gang", "Restarting")["status"] == "False" and r.reason("gang", "Running") == "AllRunning"
    assert r.status("gang")["lastRestart"]["releasedAt"] and _status_writes(r, "gang") == before + 1


def test_a_successor_finishes_a_release_its_predecessor_did_not_record():
    r = rig(nodes=4, release_record_seconds=10)
    r.submit(make_job("handed", 2))
    r.step()
    assert r.reason("handed") == "Placing"
    successor = PlacementLoop(r.state, r.api, r.loop.ctx.settings, lambda: True, clock=r.clock)  # blank memory
    asyncio.run(successor.run_once())
    r.deliver()
    r.api.bind_released()
    r.deliver()
    asyncio.run(successor.run_once())
    r.deliver()
    assert r.reason("handed") == "Released" and r.reason("handed", "Running") == "AllRunning"
    assert r.pods() == {"handed-0", "handed-1"}, "no pod re-created"
    assert sum(1 for verb, what in r.api.writes if verb == "PATCH" and what.startswith("pods/")) == 2, \
        "the predecessor's release is taken as it is: no pod released twice"


def test_a_gang_that_fails_before_it_runs_records_its_release_before_it_restarts():
    r = rig(nodes=4, release_record_seconds=10)
    r.submit(make_job("flaky", 2))
    r.step()
    r.api.bind_released()
    pod = copy.deepcopy(r.api.objects["pods"][("default", "flaky-1")])
    pod["status"]["phase"] = "Failed"
    pod["status"]["containerStatuses"] = [{"name": "train", "state": {"terminated": {"exitCode": 1}}}]
    r.api._store("pods", pod, "MODIFIED")
    r.deliver()
    r.step()
    assert r.reason("flaky") == "Released" and not r.status("flaky").get("restartCount"), "the release first"
    assert r.status("flaky")["placement"]["releasedAt"], "what the restart's backoff counts the attempt from"
    r.step()  # the failure's restart waits out its backoff
    r.clock.advance(120)
    r.step()
    assert r.status("flaky")["restartCount"] == 1 and r.status("flaky")["lastRestart"]["reason"] == "ProcessFailed"
