"""What a pass skips on a busy cluster, and that each skip ends when what it stood on changes: a
finished job's Done (cache/memory.JobMemory.done), a job's unchanged addresses (endpoints_checked)."""

from __future__ import annotations

import copy

from tests.support.harness import rig
from tests.support.jobs import make_job


def _finished(r, name: str) -> None:
    r.submit(make_job(name, 2))
    r.running()
    r.step()
    r.succeed_all()
    r.step(3)
    assert r.reason(name, "Succeeded") is not None


def test_a_finished_jobs_skip_ends_when_a_live_pod_of_it_appears():
    r = rig(nodes=4)
    _finished(r, "over")
    assert r.loop.ctx.memories.recall(r.state.jobs[("default", "over")]).done is not None, "skipped from now on"
    stray = copy.deepcopy(r.api.objects["pods"][("default", "over-0")])
    stray["metadata"]["name"] = "over-0-stray"
    stray["metadata"].pop("uid")
    stray["status"]["phase"] = "Running"
    r.api._store("pods", stray, "ADDED")  # a pod of the finished job, alive (a late create, a stuck one)
    r.deliver()
    r.step(2)
    assert "over-0-stray" in {name for name, _ in r.api.deletions}, "cleaned up as before the skip existed"


def test_a_finished_jobs_skip_ends_when_the_job_changes():
    r = rig(nodes=4)
    _finished(r, "edited")
    key = ("default", "edited")
    before = r.loop.ctx.memories.recall(r.state.jobs[key]).done
    body = copy.deepcopy(r.api.objects["trainingjobs"][key])
    body["metadata"].setdefault("labels", {})["touched"] = "yes"
    r.api._store("trainingjobs", body, "MODIFIED")
    r.deliver()
    r.step()
    after = r.loop.ctx.memories.recall(r.state.jobs[key]).done
    assert before is not None and after is not None and after != before, "assessed again, and Done again"
