"""In-place restarts (issue 47, `faultPolicy.restartStrategy: InPlace`) against the in-memory API: a restart replaces
only the lost ranks' pods; the healthy ranks' pods stay (same names and uids), are labelled with the new attempt,
and their supervisors are told the new attempt on their reports. A leader change right after the restart was
recorded finishes it without touching the kept pods."""

from __future__ import annotations

import copy
from typing import Any

from railyard.operator.act.attempts import Attempts
from railyard.operator.cache.state_views import node_models  # noqa: F401  (the restart path's own imports load)
from railyard.operator.decide.reports import WorkerReport, check_report

from tests.support.harness import Rig, rig
from tests.support.jobs import make_job

RESTART = "railyard.dev/restart-count"


def _running(strategy: str = "InPlace") -> Rig:
    r = rig(nodes=6, tors=1, report_url="https://reports.example:8090/v1/reports")
    r.submit(make_job("llm", 4, faultPolicy={"restartStrategy": strategy}))
    r.running()
    return r


def _pods(r: Rig) -> dict[str, dict[str, Any]]:
    return {name: pod for (_, name), pod in r.api.objects["pods"].items()
            if not pod["metadata"].get("deletionTimestamp")}


def _lose_rank(r: Rig, rank: int) -> str:
    node = next(x["node"] for x in r.status("llm")["placement"]["ranks"] if x["rank"] == rank)
    r.api._remove("nodes", ("", node))
    r.deliver()
    return node


def _restarted(r: Rig) -> dict[str, Any]:
    r.step(2)
    r.api.bind_released()
    r.deliver()
    r.step()
    return r.status("llm")


def test_a_lost_node_replaces_its_ranks_pod_and_keeps_the_others():
    r = _running()
    before = {n: p["metadata"]["uid"] for n, p in _pods(r).items()}
    _lose_rank(r, 2)
    status = _restarted(r)
    assert status["restartCount"] == 1
    ranks = {x["rank"]: x["pod"] for x in status["placement"]["ranks"]}
    pods = _pods(r)
    for rank in (0, 1, 3):
        assert ranks[rank] == f"llm-{rank}" and pods[ranks[rank]]["metadata"]["uid"] == before[ranks[rank]], \
            "the same pod, kept"
        assert pods[ranks[rank]]["metadata"]["labels"][RESTART] == "1", "labelled with the new attempt"
    assert ranks[2] != "llm-2" and ranks[2] in pods, "rank 2's pod is new, named for the new placement"
    assert "llm-2" not in pods
    creates = [w for w in r.api.writes if w[0] == "POST" and w[1] == "pods"]
    assert len(creates) == 5, "4 pods at first, 1 for the restart"
    assert any("3 of 4 ranks restart in their pods" in (c.get("message") or "") for c in status["conditions"])
    assert r.reason("llm") == "Released" and r.status("llm").get("replicas") == 4


def test_a_kept_pods_report_of_the_old_attempt_is_answered_with_the_new_attempt():
    r = _running()
    _lose_rank(r, 0)
    _restarted(r)
    job = r.state.jobs[("default", "llm")]
    pod = r.state.pods[("default", "llm-1")]
    old = WorkerReport.model_validate({"namespace": "default", "job": "llm", "rank": 1, "restartCount": 0})
    refusal = check_report(old, "default", "llm-1", pod.uid, pod, job)
    assert refusal is not None and refusal.status == 409 and refusal.attempt is not None
    assert refusal.attempt["restartCount"] == 1
    assert refusal.attempt["env"]["RAILYARD_RESTART_COUNT"] == "1"
    new = WorkerReport.model_validate({"namespace": "default", "job": "llm", "rank": 1, "restartCount": 1})
    assert check_report(new, "default", "llm-1", pod.uid, pod, job) is None, "its restarted process reports"


def test_recreate_is_the_default_and_replaces_every_pod():
    r = _running("Recreate")
    _lose_rank(r, 2)
    status = _restarted(r)
    assert all(x["pod"].startswith("llm.p1-") for x in status["placement"]["ranks"])
    assert not {"llm-0", "llm-1", "llm-3"} & set(_pods(r))


def test_a_failed_process_replaces_its_pod_on_the_same_node_and_keeps_the_others():
    r = _running()
    failed = copy.deepcopy(r.api.objects["pods"][("default", "llm-1")])
    failed["status"]["phase"] = "Failed"
    r.api._store("pods", failed, "MODIFIED")
    r.deliver()
    nodes = r.nodes_of("llm")
    r.step()
    r.clock.advance(11)  # restartBackoff
    status = _restarted(r)
    assert status["restartCount"] == 1 and r.nodes_of("llm") == nodes
    ranks = {x["rank"]: x["pod"] for x in status["placement"]["ranks"]}
    assert ranks[0] == "llm-0" and ranks[2] == "llm-2" and ranks[3] == "llm-3"
    assert ranks[1] != "llm-1"


def test_a_leader_change_right_after_the_restart_was_recorded_finishes_it_and_keeps_the_pods(monkeypatch):
    from tests.unit.test_preemption_operator import _successor

    r = _running()
    before = {n: p["metadata"]["uid"] for n, p in _pods(r).items()}

    async def died(self: Attempts, *args: Any, **kwargs: Any) -> None:
        return None  # the old leader recorded the attempt and died before deleting or creating a pod

    monkeypatch.setattr(Attempts, "replace_pods", died)
    _lose_rank(r, 3)
    r.step(2)
    assert r.status("llm")["restartCount"] == 1
    monkeypatch.undo()
    new = _successor(r)
    new.step()
    new.step()
    r.api.bind_released()
    r.deliver()
    new.step()
    pods = _pods(r)
    for name in ("llm-0", "llm-1", "llm-2"):
        assert pods[name]["metadata"]["uid"] == before[name], f"{name} kept by the successor too"
        assert pods[name]["metadata"]["labels"][RESTART] == "1"
    ranks = {x["rank"]: x["pod"] for x in r.status("llm")["placement"]["ranks"]}
    assert ranks[3] in pods and pods[ranks[3]]["spec"].get("nodeName")
    assert r.reason("llm") == "Released"


def test_without_a_report_endpoint_in_place_falls_back_to_recreate():
    """The kept pods' supervisors hear of the new attempt on their reports: without the endpoint nobody would."""
    r = rig(nodes=6, tors=1)
    r.submit(make_job("llm", 4, faultPolicy={"restartStrategy": "InPlace"}))
    r.running()
    _lose_rank(r, 2)
    status = _restarted(r)
    assert all(x["pod"].startswith("llm.p1-") for x in status["placement"]["ranks"]), status["placement"]


def test_a_kept_pod_gone_before_the_new_attempt_runs_is_not_made_again_under_its_name(monkeypatch):
    from tests.unit.test_preemption_operator import _successor

    r = _running()

    async def died(self: Attempts, *args: Any, **kwargs: Any) -> None:
        return None  # the attempt recorded, nothing else done

    monkeypatch.setattr(Attempts, "replace_pods", died)
    _lose_rank(r, 3)
    r.step(2)
    monkeypatch.undo()
    r.api._remove("pods", ("default", "llm-1"))  # a kept pod deleted meanwhile
    r.deliver()
    new = _successor(r)
    new.step()
    assert "llm-1" not in _pods(r), "not made again under the kept pod's name"
    for _ in range(3):
        r.api.bind_released()
        r.deliver()
        new.step()
    status = r.status("llm")
    assert status["restartCount"] == 2, "the lost kept pod is a lost rank: the gang restarts again"
    ranks = {x["rank"]: x["pod"] for x in status["placement"]["ranks"]}
    assert ranks[1].startswith("llm.p2-") and ranks[0] == "llm-0"


def test_a_kept_pod_deleted_while_the_replacements_wait_their_turn_is_a_lost_rank_not_an_error(monkeypatch):
    from railyard.operator.act.materialiser import Materialiser

    r = _running()
    original = Materialiser.materialise

    async def drained_meanwhile(self: Materialiser, job: Any, only: Any) -> None:
        if r.status("llm").get("restartCount") == 1 and ("default", "llm-1") in r.api.objects["pods"]:
            r.api._remove("pods", ("default", "llm-1"))  # a drain took the kept pod before the release
            r.deliver()
        await original(self, job, only)

    monkeypatch.setattr(Materialiser, "materialise", drained_meanwhile)
    _lose_rank(r, 3)
    for _ in range(6):
        r.step()
        r.api.bind_released()
        r.deliver()
        r.clock.advance(5)
    status = r.status("llm")
    assert not [c for c in status["conditions"] if c["type"] == "Failed" or c.get("reason") == "InternalError"], \
        status["conditions"]
    assert status["restartCount"] == 2, "the kept pod that went is a lost rank: one more restart"
    assert "llm-1" not in _pods(r)


def test_the_new_pod_is_released_before_the_kept_pods_are_relabelled():
    """1,023 relabels took 12 s at 100,000 pods (docs/records/scale-2026-12-06.md): the release does not wait."""
    r = _running()
    _lose_rank(r, 2)
    since = len(r.api.writes)
    status = _restarted(r)
    new = next(x["pod"] for x in status["placement"]["ranks"] if x["rank"] == 2)
    writes = r.api.writes[since:]
    released = writes.index(("PATCH", f"pods/{new}"))  # its gate removed (it was created gated)
    relabelled = [i for i, w in enumerate(writes) if w in {("PATCH", f"pods/llm-{k}") for k in (0, 1, 3)}]
    assert len(relabelled) == 3 and released < min(relabelled), writes


def test_kept_pods_are_the_new_attempts_before_they_are_relabelled(monkeypatch):
    """Until the relabel (or for good, if the leader dies first) the placement says which pods are the attempt's:
    a kept pod's supervisor is told the new attempt, its process's reports count, its name resolves, a drain waits
    for its save, and its GPUs are held by it rather than reserved twice."""
    from railyard.operator.act.materialiser import Materialiser
    from railyard.operator.decide import eviction_review
    from railyard.operator.decide.rank_addresses import addresses

    async def never(self: Materialiser, job: Any) -> None:
        return None

    monkeypatch.setattr(Materialiser, "carry_over", never)
    r = _running()
    _lose_rank(r, 0)
    status = _restarted(r)
    assert status["restartCount"] == 1 and r.reason("llm") == "Released"
    job = r.state.jobs[("default", "llm")]
    pod = r.state.pods[("default", "llm-1")]
    assert pod.labels[RESTART] == "0" and job.placement is not None and pod.placement_id != job.placement.id, \
        "not relabelled: the case under test"
    old = WorkerReport.model_validate({"namespace": "default", "job": "llm", "rank": 1, "restartCount": 0})
    refusal = check_report(old, "default", "llm-1", pod.uid, pod, job)
    assert refusal is not None and refusal.attempt is not None and refusal.attempt["restartCount"] == 1
    new = WorkerReport.model_validate({"namespace": "default", "job": "llm", "rank": 1, "restartCount": 1})
    assert check_report(new, "default", "llm-1", pod.uid, pod, job) is None
    named = addresses(job, job.placement, r.state.pods)
    assert named is not None and [a.hostname for a in named] == [f"llm-{k}" for k in range(4)], named
    assert eviction_review.judge(pod, job, r.state.health.get(pod.node_name or ""), True, 0.0, 300).held
    assert not [ranks for key, _, ranks in r.state.reserved_ranks() if key == ("default", "llm")]
