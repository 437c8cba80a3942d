"""Save on fault through the operator (issue 47) against the in-memory API: a job that declares
`checkpoint.saveOnFault` loses a node without warning; the survivor that holds the model's shard is asked (on its
report answers) to save the last step it completed, the restart waits for it within SAVE_ON_FAULT_SECONDS, and the
new attempt resumes from that step — or from the last committed checkpoint when no answer comes, saying which."""

from __future__ import annotations

from railyard.operator.decide.reports import WorkerReport

from tests.support.harness import Rig, rig
from tests.support.jobs import make_job


def _report(r: Rig, rank: int, attempt: int, step: int, saved: tuple[int, ...] = (),
            fault_save: int | None = None) -> None:
    body = {"namespace": "default", "job": "llm", "rank": rank, "restartCount": attempt, "step": step,
            "checkpoints": [{"step": s, "path": f"/c/{s}"} for s in saved]}
    if fault_save is not None:
        body["faultSave"] = {"step": fault_save, "path": f"/c/fault-{fault_save}"}
    r.loop.book.record(WorkerReport.model_validate(body), r.clock.time())


def _running(save_on_fault: bool = True) -> Rig:
    r = rig(nodes=6, tors=1, report_url="https://reports.example:8090/v1/reports", save_on_fault_seconds=30)
    checkpoint = {"path": "/c", "saveOnFault": save_on_fault}
    r.submit(make_job("llm", 4, checkpoint=checkpoint))
    r.running()
    for rank in range(4):
        _report(r, rank, 0, 100, saved=(100,))
    r.step()
    return r


def _lose_rank(r: Rig, rank: int) -> str:
    ranks = r.status("llm")["placement"]["ranks"]
    node = next(x["node"] for x in ranks if x["rank"] == rank)
    r.api._remove("nodes", ("", node))
    r.deliver()
    return node


def test_the_survivor_holding_the_model_saves_its_last_step_and_the_new_attempt_resumes_from_it():
    r = _running()
    _lose_rank(r, 0)
    r.step(2)
    asked = r.loop.book.directives(("default", "llm")).get("faultSave")
    assert asked == {"restartCount": 0, "savers": {"1": [0]}}, "one survivor saves the one shard (pure DP)"
    assert r.status("llm").get("restartCount", 0) == 0, "the restart waits for the save"
    _report(r, 1, 0, 123, fault_save=123)
    r.step(2)
    status = r.status("llm")
    restart = status["lastRestart"]
    assert status["restartCount"] == 1 and restart["resumeStep"] == 123
    assert restart["resumeCheckpoint"] == "/c/fault-123"
    assert restart["saveOnFault"]["outcome"] == "Saved" and restart["saveOnFault"]["savers"] == [1]
    assert "faultSave" not in r.loop.book.directives(("default", "llm")), "the request ends with its answer"
    said = [e for e in r.api.posted_events if e["reason"] == "SaveOnFault"]
    assert len(said) == 1 and said[0]["type"] == "Normal" and "step 123 saved" in said[0]["message"], said


def test_without_an_answer_in_time_the_restart_resumes_from_the_last_committed_checkpoint_and_says_why():
    r = _running()
    _lose_rank(r, 2)
    r.step(2)
    assert r.status("llm").get("restartCount", 0) == 0
    r.clock.advance(31)
    r.step(2)
    restart = r.status("llm")["lastRestart"]
    assert restart["resumeStep"] == 100
    assert restart["saveOnFault"]["outcome"] == "NoAnswer" and restart["saveOnFault"]["savers"] == [0]
    said = [e for e in r.api.posted_events if e["reason"] == "SaveOnFault"]
    assert len(said) == 1 and said[0]["type"] == "Warning" and "last checkpoint" in said[0]["message"], said


def test_a_step_older_than_the_committed_checkpoint_is_no_answer():
    r = _running()
    _lose_rank(r, 3)
    r.step(2)
    _report(r, 0, 0, 90, fault_save=90)  # not newer than step 100, which every rank saved
    r.clock.advance(31)
    r.step(2)
    assert r.status("llm")["lastRestart"]["resumeStep"] == 100


def test_a_job_that_does_not_declare_it_restarts_at_once_as_before():
    r = _running(save_on_fault=False)
    _lose_rank(r, 1)
    r.step(2)
    status = r.status("llm")
    assert status["restartCount"] == 1 and status["lastRestart"]["resumeStep"] == 100
    assert "saveOnFault" not in status["lastRestart"]
    assert "faultSave" not in r.loop.book.directives(("default", "llm"))


def test_the_wait_ends_when_every_saver_answered_even_with_nothing_to_keep():
    from railyard.operator.decide.fault_save import answered

    savers = {1: (0,), 3: (0,)}
    assert answered(savers, {1: (120, "/c/120")}, 100) is False, "rank 3 has not answered: wait"
    assert answered(savers, {1: (120, "/c/120"), 3: (120, "/c/120")}, 100) == (120, "/c/120")
    assert answered(savers, {1: (120, "/c/120"), 3: (119, "/c/119")}, 100) is True, "two steps: no checkpoint"
    assert answered(savers, {1: (120, "/a"), 3: (120, "/b")}, 100) is True, "two places: no checkpoint"
    assert answered(savers, {1: (100, "/c/100"), 3: (100, "/c/100")}, 100) is True, "nothing newer to keep"


def test_a_stragglers_eviction_is_no_fault_to_save_on():
    from railyard.operator.decide.actions import Restart
    from railyard.operator.decide.fault_save import plan_fault_save
    from railyard.topology.cluster.faults import LossReason

    r = _running()
    job = r.state.jobs[("default", "llm")]
    assert job.request is not None
    assert plan_fault_save(job, Restart(LossReason.STRAGGLER, "slow", job.request), []) is None


def test_a_saver_lost_while_saving_hands_its_shard_to_the_next_survivor_within_the_same_wait():
    r = _running()
    _lose_rank(r, 0)
    r.step(2)
    assert r.loop.book.directives(("default", "llm"))["faultSave"]["savers"] == {"1": [0]}
    _lose_rank(r, 1)  # the saver dies before it answers
    r.step(2)
    assert r.loop.book.directives(("default", "llm"))["faultSave"]["savers"] == {"2": [0]}, "asked of rank 2 now"
    assert r.status("llm").get("restartCount", 0) == 0, "still within the wait"
    _report(r, 2, 0, 124, fault_save=124)
    r.step(2)
    restart = r.status("llm")["lastRestart"]
    assert restart["resumeStep"] == 124 and restart["saveOnFault"]["savers"] == [2], restart


def test_a_save_that_holds_fewer_shards_than_asked_is_no_answer():
    from railyard.operator.cache.progress_book import ProgressBook
    from railyard.operator.decide.reports import WorkerReport

    book = ProgressBook()
    key = ("default", "llm")
    body = {"namespace": "default", "job": "llm", "rank": 1, "restartCount": 0, "step": 9,
            "faultSave": {"step": 9, "path": "/c/9", "localRanks": [0]}}
    book.record(WorkerReport.model_validate(body), 0.0)
    assert book.fault_saved(key, 0, {1: (0,)}) == {1: (9, "/c/9")}
    assert book.fault_saved(key, 0, {1: (0, 1)}) == {}, "asked for local ranks 0 and 1 since: not yet saved"
    assert book.fault_saved(key, 0, {2: (0,)}) == {}, "not a saver any more"


def test_a_leader_change_during_the_wait_asks_again_and_resumes_from_what_the_survivor_saved():
    """The old leader asked and died before the answer; the new one has heard nothing yet. It does not take that
    for ranks that never report: it listens, asks the survivor again, and the survivor's save (made once, still on
    its reports) is the resume step."""
    from tests.unit.test_preemption_operator import _successor

    r = _running()
    _lose_rank(r, 0)
    r.step(2)
    assert "faultSave" in r.loop.book.directives(("default", "llm"))
    new = _successor(r)
    new.step()
    assert r.status("llm").get("restartCount", 0) == 0, "the new leader waits for reports before restarting"
    r.clock.advance(2)
    body = {"namespace": "default", "job": "llm", "rank": 1, "restartCount": 0, "step": 123,
            "faultSave": {"step": 123, "path": "/c/fault-123", "localRanks": [0]}}
    new.book.record(WorkerReport.model_validate(body), r.clock.time())
    for rank in (2, 3):
        new.book.record(WorkerReport.model_validate({**body, "rank": rank, "faultSave": None}), r.clock.time())
    new.step()
    assert new.book.directives(("default", "llm"))["faultSave"]["savers"] == {"1": [0]}, "asked again"
    new.step()
    restart = r.status("llm")["lastRestart"]
    assert restart["resumeStep"] == 123 and restart["saveOnFault"]["outcome"] == "Saved", restart


def test_a_later_restart_that_is_no_fault_to_save_on_does_not_keep_the_earlier_outcome():
    r = _running()
    _lose_rank(r, 0)
    r.step(2)
    _report(r, 1, 0, 123, fault_save=123)
    r.step(2)
    assert r.status("llm")["lastRestart"]["saveOnFault"]["outcome"] == "Saved"
    r.api.bind_released()
    r.deliver()
    r.step()
    node = r.nodes_of("llm")[2]
    cordoned = r.api.objects["nodes"][("", node)]
    cordoned = {**cordoned, "metadata": {**cordoned["metadata"],
                                         "annotations": {"railyard.dev/maintenance": "kernel upgrade"}}}
    r.api._store("nodes", cordoned, "MODIFIED")
    r.deliver()
    r.clock.advance(700)  # past the planned move's checkpoint wait (nobody reports in this attempt)
    r.step(3)
    restart = r.status("llm")["lastRestart"]
    assert r.status("llm")["restartCount"] == 2 and restart["reason"] == "Maintenance", restart
    assert "saveOnFault" not in restart, "a planned move saves every rank's step first: no save on fault to report"
