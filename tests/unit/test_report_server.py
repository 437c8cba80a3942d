"""The report endpoint over a real socket: its limits hold before any TokenReview is spent, and only a
token the API server says is for our audience and bound to the rank's pod is accepted."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from typing import Any

import pytest
from railyard.operator.base.objects import parse_job, pod_view
from railyard.operator.base.settings import ReportSettings
from railyard.operator.cache.progress_book import ProgressBook
from railyard.operator.cache.state import ClusterState
from railyard.operator.kube.bounded_http import BoundedHttpServer, Limits, Request
from railyard.operator.kube.report_server import REVIEWS_IN_FLIGHT, REVIEWS_WAITING, SOURCE_BURST, ReportServer

JOB_UID = "job-uid"


class Reviewer:
    """Answers TokenReviews like the API server would for tokens named `good-<pod>`; counts them.
    `hold` makes every review wait until released (a slow API server)."""

    def __init__(self, audiences: list[str] | None = None) -> None:
        self.calls = 0
        self.audiences = ["railyard.dev"] if audiences is None else audiences
        self.hold: asyncio.Event | None = None
        self.closed_on: threading.Thread | None = None

    async def aclose(self) -> None:
        self.closed_on = threading.current_thread()

    async def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]:
        self.calls += 1
        if self.hold is not None:
            await self.hold.wait()
        if not token.startswith("good-"):
            return {"authenticated": False}
        pod = token[5:]
        return {"authenticated": True, "audiences": self.audiences,
                "user": {"username": "system:serviceaccount:ml:default",
                         "extra": {"authentication.kubernetes.io/pod-name": [pod],
                                   "authentication.kubernetes.io/pod-uid": [f"uid-{pod}"]}}}


def _state(owner: str = JOB_UID) -> ClusterState:
    state = ClusterState()
    job = parse_job({"metadata": {"name": "llm", "namespace": "ml", "uid": JOB_UID}, "spec": {"replicas": 1},
                     "status": {"restartCount": 0}})
    state.jobs[job.key] = job
    pod = pod_view({"metadata": {"name": "llm.p0-0", "namespace": "ml", "uid": "uid-llm.p0-0",
                                 "ownerReferences": [{"uid": owner, "controller": True}],
                                 "labels": {"railyard.dev/job-name": "llm", "railyard.dev/rank": "0",
                                            "railyard.dev/restart-count": "0"}}, "spec": {}, "status": {}})
    state.pods[pod.key] = pod
    return state


@pytest.fixture
def served():
    servers: list[ReportServer] = []

    def serve(reviewer: Reviewer, state: ClusterState | None = None, **settings: Any) -> ReportServer:
        server = ReportServer(state or _state(), ProgressBook(), reviewer, ReportSettings(port=0,
                                                                                           **settings), lambda: True)
        assert server.start(ephemeral=True)
        servers.append(server)
        return server

    yield serve
    for s in servers:
        s.stop()


def _port(server: ReportServer) -> int:
    assert server.http is not None
    return server.http.port


async def post(port: int, token: str | None, body: bytes | None = None, path: str = "/v1/reports",
               method: str = "POST") -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"namespace": "ml", "job": "llm", "rank": 0, "restartCount": 0}).encode() if body is None \
        else body
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, data = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(data)


async def test_a_good_report_is_accepted_and_recorded(served):
    reviewer = Reviewer()
    server = served(reviewer)
    status, answer = await post(_port(server), "good-llm.p0-0")
    assert (status, answer["accepted"]) == (200, True)
    assert 0 in server.book.jobs[("ml", "llm")].ranks


async def test_the_audience_the_api_server_confirms_must_be_ours(served):
    status, answer = await post(_port(served(Reviewer(audiences=["https://kubernetes.default.svc"]))),
                                "good-llm.p0-0")
    assert (status, answer["reason"]) == (401, "unauthenticated")


async def test_a_look_alike_pod_not_owned_by_the_job_may_not_report(served):
    status, answer = await post(_port(served(Reviewer(), _state(owner="someone-else"))), "good-llm.p0-0")
    assert status == 403 and "not owned by TrainingJob llm" in answer["message"]


async def test_one_source_gets_a_burst_of_reviews_then_429_before_any_review(served):
    reviewer = Reviewer()
    server = served(reviewer, source_rate_per_second=0.001)
    answers = [await post(_port(server), f"bogus-{i}") for i in range(int(SOURCE_BURST) + 20)]
    assert reviewer.calls == SOURCE_BURST, "each bogus token past the burst must cost no TokenReview"
    assert [s for s, _ in answers[-20:]] == [429] * 20
    assert answers[-1][1]["reason"] == "rate_limited"


async def test_reviews_beyond_the_bounded_queue_get_429_at_once(served):
    reviewer = Reviewer()
    server = served(reviewer, source_rate_per_second=1e6)
    assert server.http is not None and server.http._loop is not None
    reviewer.hold = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_event(), server.http._loop))
    pending = [asyncio.create_task(post(_port(server), f"bogus-{i}")) for i in range(REVIEWS_WAITING)]
    await _until(lambda: server._waiting >= REVIEWS_WAITING)
    started = time.monotonic()
    status, answer = await post(_port(server), "bogus-extra")
    assert (status, answer["reason"]) == (429, "reviews_busy") and time.monotonic() - started < 2
    assert reviewer.calls == REVIEWS_IN_FLIGHT, "only REVIEWS_IN_FLIGHT reviews reach the API server at once"
    server.http._loop.call_soon_threadsafe(reviewer.hold.set)
    assert {s for s, _ in await asyncio.gather(*pending)} == {401}


async def _event() -> asyncio.Event:
    return asyncio.Event()  # made on the server's loop, which waits on it


async def test_reviews_beyond_the_review_rate_get_429_whatever_the_source(served):
    reviewer = Reviewer()
    server = served(reviewer, source_rate_per_second=1e6, reviews_per_second=5)
    answers = [(await post(_port(server), f"bogus-{i}"))[0] for i in range(30)]
    assert reviewer.calls <= 6 and answers.count(429) >= 24, (reviewer.calls, answers)


async def test_an_oversized_body_is_refused_unread_and_costs_no_review(served):
    reviewer = Reviewer()
    status, answer = await post(_port(served(reviewer)), "good-llm.p0-0", b"x" * (64 * 1024 + 1))
    assert (status, answer["reason"], reviewer.calls) == (413, "too_large", 0)


async def test_a_client_still_sending_a_refused_body_reads_the_413(served):
    # Closing with the body unread would make the kernel reset the connection, and the reset destroys
    # the answer before the client reads it: the server drops the rest (bounded) and half-closes first.
    port = _port(served(Reviewer()))
    for _ in range(5):
        status, answer = await post(port, "good-llm.p0-0", b"x" * (512 * 1024))
        assert (status, answer["reason"]) == (413, "too_large")


async def test_wrong_path_or_method(served):
    reviewer = Reviewer()
    server = served(reviewer)
    assert (await post(_port(server), "good-llm.p0-0", path="/"))[0] == 404
    assert (await post(_port(server), "good-llm.p0-0", method="GET"))[0] == 405
    assert reviewer.calls == 0


async def test_a_standby_answers_503_without_a_review():
    reviewer = Reviewer()
    server = ReportServer(_state(), ProgressBook(), reviewer, ReportSettings(port=0), lambda: False)
    assert server.start(ephemeral=True)
    try:
        assert (await post(_port(server), "good-llm.p0-0"))[0] == 503 and reviewer.calls == 0
    finally:
        server.stop()


def test_stopping_closes_the_reviewers_connections_on_the_servers_own_loop():
    reviewer = Reviewer()
    server = ReportServer(_state(), ProgressBook(), reviewer, ReportSettings(port=0), lambda: True)
    assert server.start(ephemeral=True)
    server.stop()
    assert reviewer.closed_on is not None and reviewer.closed_on.name == "railyard-reports"


async def test_a_client_that_sends_headers_slowly_is_cut_off():
    async def never(_: Request) -> tuple[int, dict[str, Any]]:
        raise AssertionError("no request completes")

    http = BoundedHttpServer(never, 0, limits=Limits(header_seconds=0.3, body_seconds=0.3))
    assert http.start()
    try:
        for partial in (b"POST /v1/reports HTTP/1.1\r\nHost:", b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nab"):
            reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
            writer.write(partial)
            started = time.monotonic()
            assert await asyncio.wait_for(reader.read(), 5) == b"", "closed without an answer"
            assert time.monotonic() - started < 3
            writer.close()
    finally:
        http.stop()


def test_a_busy_report_port_does_not_stop_the_operator():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        server = ReportServer(ClusterState(), ProgressBook(), Reviewer(), ReportSettings(port=taken.getsockname()[1]),
                              lambda: True)
        assert server.start() is False  # logged, not raised
        server.stop()


async def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def _review(pod: str, dry_run: bool = False) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "r-1", "namespace": "ml", "name": pod, "subResource": "eviction",
                                   "operation": "CREATE", "dryRun": dry_run}}).encode()


async def test_the_eviction_webhook_notes_a_gang_pods_eviction_only(served):
    server = served(Reviewer())
    status, answer = await post(_port(server), None, _review("llm.p0-0", dry_run=True), path="/v1/evictions")
    assert (status, answer["response"]["allowed"]) == (200, True)
    assert not server.evictions.requested("ml", time.monotonic()), "a dry run changes nothing"
    status, answer = await post(_port(server), None, _review("someone-elses"), path="/v1/evictions")
    assert answer["response"] == {"uid": "r-1", "allowed": True}
    status, answer = await post(_port(server), None, _review("llm.p0-0"), path="/v1/evictions")
    assert status == 200 and answer["response"]["allowed"] is True and answer["response"]["uid"] == "r-1", \
        "not on a draining node: allowed (decide/eviction_review.judge; test_maintenance holds one)"
    assert server.evictions.requested("ml", time.monotonic()) == {"llm.p0-0"}, "a gang pod's only"
    assert not server.evictions.requested("other", time.monotonic())
    status, answer = await post(_port(server), None, b'{"kind": "Pod"}', path="/v1/evictions")
    assert status == 400 and "AdmissionReview" in answer["message"]
