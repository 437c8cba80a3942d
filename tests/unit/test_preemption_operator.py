"""Gang preemption against the decision core (in-memory API): a higher-priority gang that does not fit
evicts whole lower-priority gangs from one TOR, checkpoint first; they are requeued, not failed; its
target is held while they go; Never is honoured; the hourly cap holds; a preemption nobody needs any
more is cancelled and the victim runs on."""

from __future__ import annotations

from typing import Any

import pytest
from railyard.operator.cache.memory import holds
from railyard.operator.decide.reports import WorkerReport

from tests.support.harness import Rig, rig
from tests.support.jobs import make_job


def _class(r: Rig, name: str, value: int, policy: str | None = None) -> None:
    body: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                            "metadata": {"name": name}, "value": value}
    if policy:
        body["preemptionPolicy"] = policy
    r.api._store("priorityclasses", body, "ADDED")
    r.deliver()


def _job(name: str, replicas: int, class_name: str, **spec: Any) -> dict[str, Any]:
    body = make_job(name, replicas, **spec)
    body["spec"]["priorityClassName"] = class_name
    return body


def _report(r: Rig, job: str, rank: int, step: int, saved: tuple[int, ...] = ()) -> None:
    r.loop.book.record(WorkerReport.model_validate({
        "namespace": "default", "job": job, "rank": rank, "restartCount": r.status(job).get("restartCount", 0),
        "step": step, "checkpoints": [{"step": s, "path": f"/c/{s}"} for s in saved]}), r.clock.time())


def _full(**placement: Any) -> Rig:
    """Two TORs of two 8-GPU nodes, each node running a one-node low-priority job; the TOR-1 jobs
    saved recently, the TOR-0 jobs long ago."""
    r = rig(nodes=2, tors=2, **placement)
    _class(r, "low", 10)
    _class(r, "high", 1000)
    for name in ("a", "b", "c", "d"):
        r.submit(_job(name, 1, "low", checkpoint={"path": "/c"}))
    r.running()
    return r


def _tor(r: Rig, job: str) -> str:
    node = r.nodes_of(job)[0]
    return r.state.nodes[node].tor


def _conditions(r: Rig, job: str) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in r.status(job).get("conditions") or []}


def test_a_high_priority_gang_clears_one_tor_of_the_gangs_that_lose_least_and_lands_there():
    r = _full()
    tors = {name: _tor(r, name) for name in "abcd"}
    r.clock.advance(600)
    # The two jobs of one TOR committed a checkpoint a moment ago: evicting them loses the least work.
    fresh_tor = tors["c"]
    fresh = [n for n in "abcd" if tors[n] == fresh_tor]
    for name in fresh:
        _report(r, name, 0, 100, saved=(100,))
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step()
    assert r.reason("urgent") == "Preempting"
    assert {n for n in "abcd" if r.status(n).get("preemptedBy") == "default/urgent"} == set(fresh)
    assert all(_conditions(r, n)["Preempted"] == ("True", "SavingCheckpoint") for n in fresh)
    # Their ranks report and are asked to save a step; once saved, they are requeued and their pods deleted.
    r.step()
    assert all(_conditions(r, n)["Preempted"][1] == "SavingCheckpoint" for n in fresh), "not before they saved"
    for name in fresh:
        step = (r.loop.book.directives(("default", name)).get("checkpoint") or {}).get("step")
        assert step is not None and step > 100, "asked to save ahead of where it is"
        _report(r, name, 0, step, saved=(step,))
    r.step()
    for name in fresh:
        status = r.status(name)
        assert _conditions(r, name)["Preempted"] == ("True", "Preempted")
        assert _conditions(r, name)["Placed"] == ("False", "Preempted")
        assert "Failed" not in _conditions(r, name)
        assert status["lastRestart"]["reason"] == "Preempted" and status["lastRestart"]["resumeStep"] > 100
        assert len(status["preemptions"]) == 1 and not status.get("processRestarts")
    events = [e for e in r.api.posted_events if e["reason"] == "Preempted"]
    assert events and all("default/urgent" in e["message"] for e in events), "Events name the preemptor"
    r.pods_gone()
    r.running()
    placed = {r.state.nodes[n].tor for n in r.nodes_of("urgent")}
    assert placed == {fresh_tor}
    untouched = [n for n in "abcd" if n not in fresh]
    assert all(_conditions(r, n).get("Preempted") is None for n in untouched), "the other TOR kept its gangs"


def test_the_target_is_held_while_the_victims_go():
    r = _full()
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step(2)  # victims chosen, then (nobody reports) requeued at once; their pods terminate slowly
    victims = [n for n in "abcd" if _conditions(r, n).get("Placed", ("", ""))[1] == "Preempted"]
    assert len(victims) == 2
    r.pods_gone()
    # Before the preemptor's next pass, a low job arrives that would fit on the freed nodes: it may not.
    r.submit(_job("sneaky", 1, "low"))
    r.step()
    assert r.reason("sneaky") != "Placing" and not r.status("sneaky").get("placement")
    assert r.status("urgent").get("placement"), "the preemptor got its domain"


def test_never_on_the_class_or_on_the_job_waits_instead():
    for preemptor in ({"class": "never"}, {"class": "high", "spec": {"preemption": {"policy": "Never"}}}):
        r = _full()
        _class(r, "never", 1000, policy="Never")
        r.submit(_job("polite", 2, preemptor["class"], topology={"requiredTier": "tor"}, **preemptor.get("spec", {})))
        r.step(2)
        assert r.reason("polite") in ("Unschedulable", "Reserving")
        assert not any(r.status(n).get("preemptedBy") for n in "abcd")


def test_equal_priority_never_preempts():
    r = _full()
    r.submit(_job("peer", 2, "low", topology={"requiredTier": "tor"}))
    r.step(2)
    assert r.reason("peer") in ("Unschedulable", "Reserving")
    assert not any(r.status(n).get("preemptedBy") for n in "abcd")


def test_a_job_is_preempted_at_most_n_times_an_hour():
    r = _full(preemptions_per_hour=1)
    r.submit(_job("first", 2, "high", topology={"requiredTier": "tor"}))
    r.step(2)
    victims = sorted(n for n in "abcd" if r.status(n).get("preemptions"))
    assert len(victims) == 2
    # The victims come back (the first preemptor finished), then a second urgent job wants a TOR again.
    r.api.delete_job("default", "first")
    r.pods_gone()
    r.running()
    r.submit(_job("second", 2, "high", topology={"requiredTier": "tor"}))
    r.step(2)
    again = [n for n in victims if len(r.status(n).get("preemptions") or []) > 1]
    assert not again, "a job preempted once this hour is not a victim again (RAILYARD_PREEMPTIONS_PER_HOUR=1)"


def test_a_preemption_nobody_needs_any_more_is_cancelled_and_the_victim_runs_on():
    r = _full()
    for name in "abcd":
        _report(r, name, 0, 10)
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step()
    marked = [n for n in "abcd" if r.status(n).get("preemptedBy")]
    assert len(marked) == 2
    r.api.delete_job("default", "urgent")
    r.deliver()
    r.step()
    for name in marked:
        assert _conditions(r, name)["Preempted"] == ("False", "Cancelled")
        assert _conditions(r, name)["Running"][0] == "True" and r.status(name).get("placement")
        assert not r.loop.book.directives(("default", name)).get("checkpoint"), "the hold on its ranks is lifted"


def test_a_gang_too_big_for_any_domain_preempts_nobody():
    r = _full()
    r.submit(_job("huge", 3, "high", topology={"requiredTier": "tor"}))  # 3 nodes; a TOR has 2
    r.step(2)
    assert not any(r.status(n).get("preemptedBy") for n in "abcd")
    assert "can never fit" in r.condition("huge", "Placed")["message"]


def test_a_job_that_fits_once_terminating_pods_go_waits_without_holding_or_evicting_anything():
    r = _full()
    r.api.graceful = True  # deleted pods stay Terminating, as a real kubelet's grace period keeps them
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step(2)  # two victims requeued; their pods terminate slowly
    victims = {n for n in "abcd" if r.status(n).get("preemptedBy") == "default/urgent"}
    assert len(victims) == 2 and any(p["metadata"].get("deletionTimestamp") for p in r.api.objects["pods"].values())
    r.api.delete_job("default", "urgent")  # its hold goes; the victims' pods are still terminating
    r.deliver()
    r.submit(_job("late", 1, "high"))
    r.step()
    assert r.reason("late") != "Preempting", "nothing was preempted for it: it holds nothing"
    assert not any(r.status(n).get("preemptedBy") == "default/late" for n in "abcd"), "room is coming: nobody new"
    assert ("default", "late") not in holds(r.loop.ctx.memories, r.state.jobs)
    r.pods_gone()
    r.step()
    assert r.status("late").get("placement"), "placed once the pods have gone"


def test_an_elastic_victim_is_shrunk_towards_min_replicas_and_runs_on():
    r = rig(nodes=2, tors=2, starvation_seconds=1e9)
    _class(r, "low", 10)
    _class(r, "high", 1000)
    r.submit(_job("elastic", 4, "low", minReplicas=2))
    r.running()
    assert len(r.nodes_of("elastic")) == 4
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step()
    status = r.status("elastic")
    assert (status.get("preemptedBy"), status.get("shrinkTo")) == ("default/urgent", 2)
    dropping = status["shrinkRanks"]
    dropped_nodes = {r_["node"] for r_ in status["placement"]["ranks"] if r_["rank"] in dropping}
    assert len(dropping) == 2 and len({r.state.nodes[n].tor for n in dropped_nodes}) == 1, "its ranks in one TOR"
    r.step()  # nobody reports: shrunk at once
    status = r.status("elastic")
    assert len(status["preemptions"]) == 1, "a shrink counts against the hourly cap"
    assert not set(r.nodes_of("elastic")) & dropped_nodes, "it dropped exactly the ranks the plan chose"
    assert _conditions(r, "elastic")["Preempted"] in (("True", "Shrunk"), ("False", "Readmitted"))
    assert any(e["reason"] == "Shrunk" and "default/urgent" in e["message"] for e in r.api.posted_events)
    assert status["lastRestart"]["reason"] == "Preempted" and len(status["placement"]["ranks"]) == 2
    kept_tors = {r.state.nodes[n].tor for n in r.nodes_of("elastic")}
    assert len(kept_tors) == 1, "it kept its ranks in one TOR and gave the other up"
    r.pods_gone()
    r.running()
    urgent_tors = {r.state.nodes[n].tor for n in r.nodes_of("urgent")}
    assert urgent_tors and not urgent_tors & kept_tors, "the preemptor landed in the TOR it gave up"
    assert _conditions(r, "elastic")["Running"][0] == "True" and "Failed" not in _conditions(r, "elastic")


def _rename_class(r: Rig, job: str, class_name: str) -> None:
    """The tenant edits spec.priorityClassName of a running job (the field is theirs to change)."""
    r.edit_spec(job, priorityClassName=class_name)


@pytest.mark.parametrize("renamed_to", ["no-such-class", "top"])
def test_renaming_the_class_of_a_running_gang_never_shields_it(renamed_to):
    """A tenant renames a running low gang's class to one that does not exist, or to a higher one: it still
    ranks at what it was placed at (or lowest), and a high gang that needs the room evicts it."""
    r = _full()
    _class(r, "top", 5000)
    for name in "abcd":
        assert r.status(name)["placement"]["priority"] == 10, "the value it was placed at is recorded"
        _rename_class(r, name, renamed_to)
    r.step()
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step()
    assert r.reason("urgent") == "Preempting"
    assert len([n for n in "abcd" if r.status(n).get("preemptedBy") == "default/urgent"]) == 2


def test_a_class_lowered_after_placement_lowers_the_gang():
    """The other way is honoured: a running gang moved to a lower class may be evicted by a gang between."""
    r = _full()
    _class(r, "mid", 5)
    _class(r, "between", 8)
    for name in "abcd":
        _rename_class(r, name, "mid")
    r.submit(_job("urgent", 2, "between", topology={"requiredTier": "tor"}))
    r.step()
    assert r.reason("urgent") == "Preempting"


def test_a_restart_keeps_the_priority_the_gang_was_placed_at():
    from tests.support.nodes import taint

    r = rig(nodes=3)
    _class(r, "low", 10)
    _class(r, "top", 5000)
    r.submit(_job("a", 1, "low"))
    r.running()
    _rename_class(r, "a", "top")
    taint(r.api, r.state, r.nodes_of("a")[0], "example.com/broken", "NoExecute")
    r.step()
    assert r.status("a")["restartCount"] == 1 and r.status("a")["placement"]["priority"] == 10


@pytest.mark.parametrize(("status", "message", "reason"), [
    (403, 'pods "urgent-0" is forbidden: exceeded quota: gpus, requested: nvidia.com/gpu=8', "QuotaExceeded"),
    (403, "pods with system-node-critical priorityClass is not permitted in team-a namespace", "InvalidSpec"),
])
def test_nobody_is_evicted_for_a_gang_whose_own_pods_would_be_refused(status, message, reason):
    """A gang whose pods its namespace's quota or a PriorityClass it may not use would refuse evicts nobody:
    a dry run of its pod is asked first, and the refusal is what it waits with."""
    import json

    from railyard.operator.kube.client import ApiException

    r = _full()
    refusal = ApiException(status=status, reason="Forbidden")
    refusal.body = json.dumps({"message": message})
    r.api.refuse_pods = refusal
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step(2)
    assert not any(r.status(n).get("preemptedBy") for n in "abcd"), "nobody evicted"
    assert r.reason("urgent") == reason and message in (r.condition("urgent", "Placed") or {}).get("message", "")
    assert not holds(r.loop.ctx.memories, r.state.jobs), "no nodes held for it"
    assert any(w == ("POST", "pods?dryRun") for w in r.api.writes)


def _successor(r: Rig) -> Any:
    """A new leader: the same cluster, a blank memory and an empty report book; it starts listening now."""
    import asyncio

    from railyard.operator.act.loop import PlacementLoop

    successor = PlacementLoop(r.state, r.api, r.loop.ctx.settings, lambda: True, clock=r.clock)
    successor.ctx.listening_since = r.clock.monotonic()

    def step() -> None:
        asyncio.run(successor.run_once())
        r.deliver()

    successor.step = step
    return successor


def _report_to(book: Any, r: Rig, job: str, step: int, saved: tuple[int, ...] = ()) -> None:
    book.record(WorkerReport.model_validate({
        "namespace": "default", "job": job, "rank": 0, "restartCount": r.status(job).get("restartCount", 0),
        "step": step, "checkpoints": [{"step": s, "path": f"/c/{s}"} for s in saved]}), r.clock.time())


def test_a_leader_change_while_victims_save_still_waits_for_their_step():
    """The old leader marked the victims and they were saving; the new one has heard nothing yet. It does not
    take that for ranks that never report: it waits for them, asks for its own step, and evicts once saved."""
    r = _full(report_url="https://railyard-reports.railyard-system.svc:8090")
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step()
    victims = [n for n in "abcd" if r.status(n).get("preemptedBy") == "default/urgent"]
    assert len(victims) == 2 and all(_conditions(r, n)["Preempted"][1] == "SavingCheckpoint" for n in victims)
    new = _successor(r)
    new.step()
    r.clock.advance(5)
    new.step()
    assert all(_conditions(r, n)["Preempted"][1] == "SavingCheckpoint" for n in victims), "not evicted unsaved"
    assert [n for n in "abcd" if r.status(n).get("preemptedBy")] == victims, \
        "the new leader picks no second set of victims (the marks are in the status)"
    for name in victims:
        _report_to(new.book, r, name, 100)
    new.step()
    for name in victims:
        asked = (new.book.directives(("default", name)).get("checkpoint") or {}).get("step")
        assert asked is not None and asked > 100
        _report_to(new.book, r, name, asked, saved=(asked,))
    new.step()
    for name in victims:
        assert _conditions(r, name)["Preempted"] == ("True", "Preempted")
        assert r.status(name)["lastRestart"]["resumeStep"] > 100, "resumes from the step saved for it"


def test_a_new_leader_that_hears_nobody_for_three_report_intervals_goes_ahead():
    r = _full(report_url="https://railyard-reports.railyard-system.svc:8090")
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step()
    victims = [n for n in "abcd" if r.status(n).get("preemptedBy") == "default/urgent"]
    new = _successor(r)
    new.step()
    assert all(_conditions(r, n)["Preempted"][1] == "SavingCheckpoint" for n in victims)
    r.clock.advance(16)  # > 3 x the 5 s report interval: these ranks do not report
    new.step()
    assert all(_conditions(r, n)["Preempted"] == ("True", "Preempted") for n in victims)


def test_a_landing_node_cordoned_mid_preemption_ends_the_hold_at_once():
    """The preemptor's held domain loses a node (cordoned for maintenance): the hold ends on the next pass,
    without cooling, and the gang is planned again there and then — not after the whole hold time."""
    from tests.support.nodes import cordon

    r = _full()
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step()
    hold = holds(r.loop.ctx.memories, r.state.jobs)[("default", "urgent")]
    landing = sorted(hold.nodes)[0]
    cordon(r.api, r.state, landing)
    r.step()
    now = holds(r.loop.ctx.memories, r.state.jobs).get(("default", "urgent"))
    assert now is None or landing not in now.nodes, "no longer held on a node it cannot have"
    memory = r.loop.ctx.memories.peek(r.state.jobs[("default", "urgent")])
    assert memory is not None and memory.cooling_until == float("-inf"), "planned again at once, not cooling"
    assert not [e for e in r.api.posted_events if e["reason"] == "Preempting" and "were not free" in e["message"]]


def test_an_api_error_marking_a_victim_costs_that_preemption_only():
    """The API server fails a victim's status write: that preemption plans again next pass, and a gang placed
    earlier in the same pass is recorded and released all the same."""
    from railyard.operator.kube.client import ApiException

    r = rig(nodes=2, tors=2)
    _class(r, "low", 10)
    _class(r, "high", 1000)
    for name in ("a", "b", "c"):
        r.submit(_job(name, 1, "low"))
    r.running()  # one node left free
    r.api.refuse_status["a"] = ApiException(status=500, reason="etcd leader changed")
    r.api.refuse_status["b"] = ApiException(status=500, reason="etcd leader changed")
    r.api.refuse_status["c"] = ApiException(status=500, reason="etcd leader changed")
    r.submit(_job("small", 1, "high"))
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step()
    assert r.reason("small") == "Released", "placed in the pass whose preemption failed"
    assert not holds(r.loop.ctx.memories, r.state.jobs).get(("default", "urgent")), "no hold on an unmarked plan"
    r.api.refuse_status.clear()
    r.clock.advance(10)  # its error's back-off
    r.step()
    assert r.reason("urgent") == "Preempting"
    assert any(r.status(n).get("preemptedBy") == "default/urgent" for n in "abc")


def test_a_timed_out_preemptor_cools_across_a_leader_change():
    """Its victims did not leave in time: it cools before planning again, and a new leader (blank memory)
    reads that from the status instead of evicting a second set of gangs at once."""
    r = _full(preemption_hold_seconds=30)
    r.api.graceful = True  # the victims' pods take their time to exit
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step(2)  # victims chosen, then (nobody reports) requeued; their pods stay Terminating
    first = {n for n in "abcd" if r.status(n).get("preemptedBy") == "default/urgent"}
    assert len(first) == 2
    r.clock.advance(31)
    r.step()
    assert r.status("urgent").get("roomRetryAfter"), "the cooling is in the status"
    new = _successor(r)
    new.step()
    new.step()
    assert {n for n in "abcd" if r.status(n).get("preemptedBy") == "default/urgent"} <= first, \
        "no second set of victims from the new leader"
    assert not holds(new.ctx.memories, r.state.jobs), "nor a new hold: it cools, as the old leader would have"


def test_the_hourly_move_cap_outlives_a_leader_change():
    from railyard.operator.decide.room import moves_this_hour_seen

    jobs = {}
    for i, ago in enumerate((100.0, 200.0, 5000.0)):
        job = _parsed(f"m{i}", {"lastMigration": _stamp(10_000.0 - ago)})
        jobs[job.key] = job
    assert len(moves_this_hour_seen([], jobs, now=10_000.0, mono=50.0)) == 2, "a new leader reads the status"
    assert len(moves_this_hour_seen([40.0, 45.0, 49.0], jobs, now=10_000.0, mono=50.0)) == 3, "or its memory"


def _stamp(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parsed(name: str, status: dict[str, Any]) -> Any:
    from railyard.operator.base.objects import parse_job

    body = make_job(name, 1)
    body["metadata"].update(namespace="default", uid=f"uid-{name}")
    body["status"] = status
    return parse_job(body)


def test_a_term_that_ends_is_forgotten_as_a_unit():
    r = _full()
    r.submit(_job("urgent", 2, "high", topology={"requiredTier": "tor"}))
    r.step()
    _report(r, "a", 0, 10)
    assert len(r.loop.ctx.memories) and r.loop.book.jobs
    r.loop.term_ended()
    assert not len(r.loop.ctx.memories) and not r.loop.book.jobs
