"""The operator's book of worker reports: when a checkpoint counts as committed, and who may report."""

from __future__ import annotations

import pytest
from railyard.operator.base.objects import PodView, parse_job, pod_view
from railyard.operator.cache.progress_book import ProgressBook
from railyard.operator.decide.reports import WorkerReport, check_report

KEY = ("ml", "llm")


def report(rank: int, generation: int = 0, saved: tuple[int, ...] = (), step: int = 0) -> WorkerReport:
    return WorkerReport.model_validate({"namespace": "ml", "job": "llm", "rank": rank, "generation": generation,
                                        "step": step, "checkpoints": [{"step": s, "path": f"/c/{s}"} for s in saved]})


def test_a_checkpoint_is_committed_only_when_every_rank_saved_that_step():
    book = ProgressBook()
    book.record(report(0, saved=(100, 200)), 1.0)
    assert book.committed(KEY, 0, 2) is None, "rank 1 has not reported"
    book.record(report(1, saved=(100,)), 1.0)
    assert book.committed(KEY, 0, 2) == (100, "/c/100")
    book.record(report(1, saved=(200,)), 2.0)  # later reports add to what a rank saved
    assert book.committed(KEY, 0, 2) == (200, "/c/200")
    assert book.committed(KEY, 1, 2) is None, "another generation's reports never count"


def test_a_new_generation_starts_afresh_and_old_reports_are_ignored():
    book = ProgressBook()
    book.record(report(0, saved=(100,)), 1.0)
    book.record(report(0, generation=1, saved=(300,)), 2.0)
    book.record(report(1, generation=0, saved=(300,)), 3.0)  # late, from the old generation
    book.record(report(1, generation=1, saved=(300,)), 3.0)
    assert book.committed(KEY, 1, 2) == (300, "/c/300")
    assert set(book.jobs[KEY].ranks) == {0, 1}


def _pod(name: str, rank: int, generation: int, uid: str = "u1") -> PodView:
    return pod_view({"metadata": {"name": name, "namespace": "ml", "uid": uid, "labels": {
        "railyard.dev/job-name": "llm", "railyard.dev/rank": str(rank), "railyard.dev/restart-count": str(generation)}},
        "spec": {}, "status": {}})


def test_only_the_pod_of_the_rank_of_the_current_generation_may_report():
    job = parse_job({"metadata": {"name": "llm", "namespace": "ml"}, "status": {"restartCount": 1}})
    ok = _pod("llm.p1-0", 0, 1)
    assert check_report(report(0, generation=1), "ml", "llm.p1-0", "u1", ok, job) is None
    refusals = {
        "other namespace": check_report(report(0, 1), "other", "llm.p1-0", "u1", ok, job),
        "unknown pod": check_report(report(0, 1), "ml", "llm.p1-0", "u1", None, job),
        "recycled name": check_report(report(0, 1), "ml", "llm.p1-0", "u2", ok, job),
        "other rank": check_report(report(1, 1), "ml", "llm.p1-0", "u1", ok, job),
        "old generation": check_report(report(0, 0), "ml", "llm-0", "u1", _pod("llm-0", 0, 0), job),
        "no job": check_report(report(0, 1), "ml", "llm.p1-0", "u1", ok, None),
    }
    assert {k: (r.status if r else None) for k, r in refusals.items()} == {
        "other namespace": 403, "unknown pod": 403, "recycled name": 403, "other rank": 403, "old generation": 409,
        "no job": 404}
    assert "not the job's current restart count 1" in (refusals["old generation"] or pytest.fail()).message


def test_a_malformed_report_names_the_field():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="rank"):
        WorkerReport.model_validate({"namespace": "ml", "job": "llm", "rank": -1, "generation": 0})


def test_an_accepted_token_is_trusted_until_its_own_expiry():
    import base64
    import json

    from railyard.operator.kube.report_server import token_lifetime

    def jwt(claims: dict) -> str:
        body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        return f"eyJhbGciOiJSUzI1NiJ9.{body}.signature"

    assert token_lifetime(jwt({"exp": 1_000_600}), 1_000_000) == 600
    assert token_lifetime(jwt({"exp": 999_000}), 1_000_000) == 0, "expired: review again"
    assert token_lifetime("not-a-jwt", 1_000_000) == 0 and token_lifetime(jwt({}), 0) == 0
