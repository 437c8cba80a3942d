"""railyard.worker: the contract a training script reads, and its report transport (real HTTP on
localhost, real signals)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from railyard.worker import Reporter, StopFlag, context


def test_importing_the_worker_loads_the_standard_library_only():
    code = ("import sys; before = set(sys.modules); import railyard.worker; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "print(sorted(m for m in new if m not in sys.stdlib_module_names and m != 'railyard'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_context_reads_the_operator_contract():
    ctx = context({"RANK": "3", "WORLD_SIZE": "8", "RAILYARD_JOB_NAME": "llm", "RAILYARD_NAMESPACE": "ml",
                   "RAILYARD_RESTART_COUNT": "2", "RAILYARD_RESTART_REASON": "NodeNotReady",
                   "RAILYARD_RESUME_STEP": "400", "RAILYARD_RESUME_CHECKPOINT": "/ckpt/step-400"})
    assert (ctx.rank, ctx.world_size, ctx.restart_count, ctx.resume_step) == (3, 8, 2, 400) and ctx.resuming
    assert ctx.first_step == 401 and context({"RAILYARD_RESUME_STEP": "0"}).first_step == 1
    assert not context({}).resuming and context({}).world_size == 1 and context({}).first_step == 0
    # Under torchrun RANK/WORLD_SIZE count processes; the pod's rank comes from RAILYARD_RANK.
    under_torchrun = context({"RANK": "13", "WORLD_SIZE": "16", "LOCAL_RANK": "5", "RAILYARD_RANK": "1",
                              "RAILYARD_REPLICAS": "2", "RAILYARD_REPORT_FILE": "/dev/null"})
    assert (under_torchrun.rank, under_torchrun.world_size, under_torchrun.local_rank) == (1, 2, 5)
    assert not Reporter(under_torchrun).enabled, "one reporter per pod: local rank 0"
    with pytest.raises(ValueError, match="RAILYARD_RESUME_STEP='four'"):
        context({"RAILYARD_RESUME_STEP": "four"})


def test_reports_go_to_a_file_one_json_line_each(tmp_path):
    path = tmp_path / "reports.jsonl"
    ctx = context({"RANK": "1", "WORLD_SIZE": "2", "RAILYARD_JOB_NAME": "j", "RAILYARD_REPORT_FILE": str(path)})
    clock = [0.0]
    reporter = Reporter(ctx, min_interval=5, clock=lambda: clock[0], background=False)
    assert reporter.progress(1, compute_seconds=0.5)
    assert not reporter.progress(2, compute_seconds=0.6), "throttled inside min_interval"
    assert reporter.checkpoint_saved(2, "/c/2"), "a checkpoint goes out at once"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert lines[1]["samples"] == [[2, 0.6, -1.0]] and lines[1]["checkpoints"] == [{"step": 2, "path": "/c/2"}]


def _reply(handler: BaseHTTPRequestHandler, status: int, answer: dict) -> None:
    data = json.dumps(answer).encode()
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class _Operator(BaseHTTPRequestHandler):
    answers: list[tuple[int, dict]] = []
    seen: list[tuple[str, dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.headers["Authorization"], body))
        _reply(self, *self.answers.pop(0))

    def log_message(self, *args) -> None:
        pass


def test_reports_over_http_carry_the_token_and_survive_refusals(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Operator)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _Operator.answers = [(503, {"reason": "not_leader"}), (200, {"accepted": True, "directives": {"x": 1}}),
                             (409, {"reason": "stale"})]
        _Operator.seen = []
        ctx = context({"RANK": "0", "RAILYARD_JOB_NAME": "j", "RAILYARD_TOKEN_FILE": str(token),
                       "RAILYARD_REPORT_URL": f"http://127.0.0.1:{server.server_port}/v1/reports"})
        reporter = Reporter(ctx, min_interval=0, background=False)
        assert not reporter.progress(1, compute_seconds=1.0)  # 503: kept for the next report
        token.write_text("tok-2\n")  # kubelet rotated the projected token
        assert reporter.progress(2, compute_seconds=1.1)
        assert reporter.directives == {"x": 1} and not reporter.stale
        assert not reporter.progress(3) and reporter.stale  # 409: this rank's attempt is over
        assert [auth for auth, _ in _Operator.seen] == ["Bearer tok-1", "Bearer tok-2", "Bearer tok-2"]
        assert [s[0] for s in _Operator.seen[1][1]["samples"]] == [1, 2], "nothing lost across the 503"
        _Operator.answers = [(429, {"reason": "rate_limited"}), (200, {"accepted": True})]
        assert reporter.checkpoint_saved(5, "/c/5"), "a checkpoint report is retried when the operator is busy"
        assert _Operator.seen[-1][1]["checkpoints"] == [{"step": 5, "path": "/c/5"}]
    finally:
        server.shutdown()


def test_sigterm_sets_the_stop_flag_instead_of_killing_the_process():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        flag = StopFlag.install()
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.wait(5) and flag.signal == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Blackhole:
    """An endpoint that accepts connections and never answers."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


def test_a_blackholed_endpoint_costs_the_step_loop_under_a_millisecond_a_step(tmp_path):
    import time

    token = tmp_path / "token"
    token.write_text("tok")
    hole = _Blackhole()
    try:
        ctx = context({"RANK": "0", "RAILYARD_JOB_NAME": "j", "RAILYARD_TOKEN_FILE": str(token),
                       "RAILYARD_REPORT_URL": f"http://127.0.0.1:{hole.port}/v1/reports"})
        reporter = Reporter(ctx, min_interval=0, timeout=30)
        steps = 2000
        started = time.perf_counter()
        for step in range(steps):
            reporter.progress(step, compute_seconds=0.1, step_seconds=0.2)
            if step % 500 == 0:
                reporter.checkpoint_saved(step, f"/c/{step}")
        per_step = (time.perf_counter() - started) / steps
        assert per_step < 0.001, f"{per_step * 1000:.3f} ms a step with a dead endpoint"
        payload = reporter.payload()
        assert len(payload["samples"]) <= 64 and len(payload["checkpoints"]) <= 4, "memory stays bounded"
    finally:
        hole.close()


def test_a_checkpoint_saved_on_the_way_out_is_delivered_in_the_background_before_close_returns(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Operator)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _Operator.answers = [(503, {"reason": "not_leader"}), (503, {"reason": "not_leader"}),
                             (200, {"accepted": True})]
        _Operator.seen = []
        ctx = context({"RANK": "0", "RAILYARD_JOB_NAME": "j", "RAILYARD_TOKEN_FILE": str(token),
                       "RAILYARD_REPORT_URL": f"http://127.0.0.1:{server.server_port}/v1/reports"})
        reporter = Reporter(ctx, min_interval=60)
        assert reporter.checkpoint_saved(7, "/c/7"), "queued at once, sent by the background thread"
        assert reporter.close(timeout=20), "delivered before the process exits"
        assert _Operator.seen[-1][1]["checkpoints"] == [{"step": 7, "path": "/c/7"}]
    finally:
        server.shutdown()


def test_the_report_url_never_goes_through_a_proxy(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("secret-token")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Operator)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = _Blackhole()  # a proxy would see the bearer token; this one would also hang the report
    try:
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        _Operator.answers = [(200, {"accepted": True})]
        _Operator.seen = []
        ctx = context({"RANK": "0", "RAILYARD_JOB_NAME": "j", "RAILYARD_TOKEN_FILE": str(token),
                       "RAILYARD_REPORT_URL": f"http://127.0.0.1:{server.server_port}/v1/reports"})
        assert Reporter(ctx, min_interval=0, timeout=5, background=False).progress(1)
        assert _Operator.seen and _Operator.seen[0][0] == "Bearer secret-token"
    finally:
        server.shutdown()
        proxy.close()


def test_a_rank_holds_after_the_requested_checkpoint_until_the_request_ends_or_sigterm(tmp_path):
    reporter = Reporter(context({"RAILYARD_JOB_NAME": "j"}), background=False)  # directives set by hand here
    reporter.directives = {"checkpoint": {"step": 40, "hold": True}}
    assert not reporter.holding(39) and reporter.holding(40), "hold from the requested step on"
    polls: list[int] = []

    def withdrawn() -> bool:  # the operator's later answer: the request is over (a resize called off)
        polls.append(1)
        if len(polls) == 3:
            reporter.directives = {}
        return False

    reporter.hold(40, until=withdrawn, poll_seconds=0.01)
    assert len(polls) == 3 and not reporter.holding(40), "training goes on once the request is withdrawn"
    reporter.directives = {"checkpoint": {"step": 40, "hold": True}}
    stop = StopFlag()
    threading.Timer(0.05, stop.request).start()  # SIGTERM: the restart has begun
    reporter.hold(40, until=lambda: stop.requested, poll_seconds=0.01)
    assert stop.requested
    reporter.directives = {"checkpoint": {"step": 40}}
    assert not reporter.holding(41), "a request without hold (an older operator) never pauses"


class _AskingOperator(_Operator):
    """Answers every report with a save-on-fault request for rank 1's local rank 0 (attempt 2)."""

    seen: list[dict] = []

    def do_POST(self) -> None:
        self.seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        _reply(self, 200, {"accepted": True, "directives": {"faultSave": {"restartCount": 2, "savers": {"1": [0]}}}})

    def log_message(self, *args) -> None:
        pass


def test_a_survivor_blocked_in_a_collective_still_hears_the_save_on_fault_request_and_answers_once(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AskingOperator)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _AskingOperator.seen = []
    calls: list[list[int]] = []
    blocked = threading.Event()  # the training loop: stuck in an all-reduce whose peer is gone

    def save(local_ranks: list[int]) -> tuple[int, str]:
        calls.append(local_ranks)
        assert not blocked.is_set(), "runs while the loop is still blocked"
        return 41, "/ckpt/fault-41"

    try:
        ctx = context({"RANK": "1", "RAILYARD_JOB_NAME": "j", "RAILYARD_RESTART_COUNT": "2",
                       "RAILYARD_TOKEN_FILE": str(token),
                       "RAILYARD_REPORT_URL": f"http://127.0.0.1:{server.server_port}/v1/reports"})
        reporter = Reporter(ctx, min_interval=0.05)
        reporter.progress(41)  # the last step it completed
        reporter.on_fault_save(save)  # no further progress call: only the sender's own polls reach the operator

        def answered() -> bool:
            return any((b.get("faultSave") or {}) == {"step": 41, "path": "/ckpt/fault-41", "localRanks": [0]}
                       for b in _AskingOperator.seen)

        deadline = time.monotonic() + 10
        while not answered() and time.monotonic() < deadline:
            threading.Event().wait(0.02)
        assert answered(), "the save reached the operator"
        assert calls == [[0]], "saved once, its local ranks' shards"
        assert reporter.close(5)
    finally:
        blocked.set()
        server.shutdown()
