"""railyard.worker.supervise: the training process restarted in its pod when the operator keeps the pod into a new
attempt (real processes, real HTTP on localhost, real signals)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from railyard.worker.supervise import Supervisor, applied, exit_code

# A training process: writes what attempt it runs, then waits (a survivor blocked in a collective) or exits.
CHILD = """
import os, sys, time
with open(sys.argv[1], "a") as f:
    f.write(os.environ.get("RAILYARD_RESTART_COUNT", "") + " " + os.environ.get("RAILYARD_RESUME_STEP", "-") + "\\n")
if os.environ.get("RAILYARD_RESTART_COUNT") == "1":
    sys.exit(0)
time.sleep(60)
"""


class _KeepingOperator(BaseHTTPRequestHandler):
    """Accepts attempt 0's reports until `kept` is set; then tells attempt 0 it was kept into attempt 1."""

    kept = threading.Event()
    seen: list[dict] = []
    unmarked = 0  # stale answers without the new attempt first (the pod not yet labelled as kept)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(body)
        if self.kept.is_set() and body["restartCount"] == 0 and _KeepingOperator.unmarked > 0:
            _KeepingOperator.unmarked -= 1
            status, answer = 409, {"accepted": False, "reason": "stale", "message": "not the current attempt"}
        elif self.kept.is_set() and body["restartCount"] == 0:
            status, answer = 409, {"accepted": False, "reason": "stale", "message": "x" * 400, "attempt": {
                "restartCount": 1, "env": {"RAILYARD_RESTART_COUNT": "1", "RAILYARD_RESUME_STEP": "41",
                                           "RAILYARD_PREV_WORLD_SIZE": None}}}
        else:
            status, answer = 200, {"accepted": True, "directives": {}}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def _env(tmp_path: Path, url: str) -> dict[str, str]:
    token = tmp_path / "token"
    token.write_text("tok\n")
    return {"PATH": "/usr/bin:/bin", "RAILYARD_RANK": "1", "RAILYARD_REPLICAS": "2", "RAILYARD_JOB_NAME": "j",
            "RAILYARD_NAMESPACE": "ns", "RAILYARD_RESTART_COUNT": "0", "RAILYARD_PREV_WORLD_SIZE": "2",
            "RAILYARD_TOKEN_FILE": str(token), "RAILYARD_REPORT_URL": url, "RAILYARD_SUPERVISE_POLL_SECONDS": "0.1",
            "RAILYARD_SUPERVISE_STOP_SECONDS": "5"}


def _wait_for(check, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert check()


def test_a_kept_pods_process_is_restarted_with_the_new_attempts_environment(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeepingOperator)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _KeepingOperator.kept.clear()
    _KeepingOperator.seen = []
    out = tmp_path / "attempts"
    try:
        supervisor = Supervisor([sys.executable, "-c", CHILD, str(out)],
                                _env(tmp_path, f"http://127.0.0.1:{server.server_port}/v1/reports"))
        result: list[int] = []
        runner = threading.Thread(target=lambda: result.append(supervisor.run()), daemon=True)
        runner.start()
        _wait_for(lambda: out.exists() and _KeepingOperator.seen)
        assert out.read_text() == "0 -\n", "attempt 0 runs; nothing to resume from"
        assert _KeepingOperator.seen[0]["step"] is None and _KeepingOperator.seen[0]["rank"] == 1
        _KeepingOperator.kept.set()  # the gang restarts; this pod is kept
        runner.join(20)
        assert result == [0], "the new child's exit is the supervisor's"
        assert out.read_text() == "0 -\n1 41\n", "the same pod's process restarted as attempt 1, resuming at 41"
        assert supervisor.restarts == 1 and "RAILYARD_PREV_WORLD_SIZE" not in supervisor.env
    finally:
        server.shutdown()


def test_a_child_that_quits_on_a_stale_answer_before_the_pod_is_marked_kept_is_still_restarted(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeepingOperator)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _KeepingOperator.kept.set()
    _KeepingOperator.unmarked = 3
    out = tmp_path / "attempts"
    quits = CHILD.replace("time.sleep(60)", "sys.exit(0)")  # attempt 0 quits at once (it heard "stale")
    try:
        supervisor = Supervisor([sys.executable, "-c", quits, str(out)],
                                _env(tmp_path, f"http://127.0.0.1:{server.server_port}/v1/reports"))
        assert supervisor.run() == 0
        assert out.read_text() == "0 -\n1 41\n", "restarted as attempt 1 rather than ending the pod"
    finally:
        server.shutdown()
        _KeepingOperator.unmarked = 0


def test_the_childs_own_exit_ends_the_supervisor_with_its_code(tmp_path):
    for code, want in (("sys.exit(3)", 3), ("import os; os.kill(os.getpid(), 9)", 128 + 9)):
        supervisor = Supervisor([sys.executable, "-c", f"import sys; {code}"], {"PATH": "/usr/bin:/bin"})
        assert supervisor.run() == want


def test_sigterm_reaches_the_child_and_no_restart_follows(tmp_path):
    supervisor = Supervisor([sys.executable, "-c", "import time; time.sleep(60)"], {"PATH": "/usr/bin:/bin"})
    supervisor.forward(signal.SIGTERM)
    assert supervisor.run() == 128 + signal.SIGTERM
    supervisor.restart({"restartCount": 5, "env": {}})
    assert supervisor.restarts == 0, "a pod on its way out starts no new child"


def test_the_module_runs_a_command_and_says_how_to_use_it():
    ok = subprocess.run([sys.executable, "-m", "railyard.worker.supervise", "--", sys.executable, "-c",
                         "import sys; sys.exit(4)"], capture_output=True)
    assert ok.returncode == 4
    bare = subprocess.run([sys.executable, "-m", "railyard.worker.supervise"], capture_output=True, text=True)
    assert bare.returncode == 2 and "usage" in bare.stderr


def test_an_attempts_variables_are_set_or_unset():
    assert applied({"A": "1", "B": "2"}, {"A": "3", "B": None, "C": "4"}) == {"A": "3", "C": "4"}
    assert exit_code(-15) == 143 and exit_code(0) == 0
