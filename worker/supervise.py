"""In-place restarts (a TrainingJob with `faultPolicy.restartStrategy: InPlace`): runs the training command as a
child process and, when the operator keeps this pod across a gang restart, stops the child and starts it again
with the new attempt's environment (restart count and reason, resume step and checkpoint), without a new pod.

    python -m railyard.worker.supervise -- python train.py --steps 1000

The supervisor reports for its rank (no steps) every RAILYARD_SUPERVISE_POLL_SECONDS (2); the operator answers a
report of an older attempt from a pod it kept with the new attempt. The old child gets SIGTERM and
RAILYARD_SUPERVISE_STOP_SECONDS (10) before SIGKILL. The child's own exit ends the supervisor with its exit code
(128 + the signal for a signal), so the pod fails or succeeds as it would without the supervisor; SIGTERM and
SIGINT are passed to the child. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from railyard.worker.context import context
from railyard.worker.reporter import Reporter


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r}: expected a number of seconds") from None


def applied(env: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """The environment with an attempt's variables set (None: unset)."""
    out = dict(env)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = str(value)
    return out


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _say(event: str, **fields: Any) -> None:
    sys.stderr.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stderr.flush()


class Supervisor:
    def __init__(self, command: Sequence[str], env: Mapping[str, str],
                 start: Callable[..., subprocess.Popen] = subprocess.Popen) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.poll = _seconds(env, "RAILYARD_SUPERVISE_POLL_SECONDS", 2.0)
        self.stop_seconds = _seconds(env, "RAILYARD_SUPERVISE_STOP_SECONDS", 10.0)
        self._start = start
        self.stopping: int | None = None  # the signal the pod got: no more restarts
        self.restarts = 0
        self.child = self._start(self.command, env=self.env)
        self.reporter = Reporter(context(self.env), min_interval=self.poll, background=False)
        self._lock = threading.RLock()  # taken in the signal handler too, which runs on the main thread

    def forward(self, signum: int, _frame: object = None) -> None:
        with self._lock:
            self.stopping = signum
            if self.child.poll() is None:
                self.child.send_signal(signum)

    def next_attempt(self) -> dict[str, Any] | None:
        """The operator's word that this pod was kept into a newer attempt, if it says so now."""
        if not self.reporter.enabled:
            return None  # no report endpoint: nobody can say
        self.reporter.stale = False
        self.reporter.flush()
        attempt = self.reporter.next_attempt
        if not attempt or int(attempt.get("restartCount", -1)) <= self.reporter.ctx.restart_count:
            return None
        return attempt

    def restart(self, attempt: Mapping[str, Any]) -> None:
        """Stop the child (SIGTERM, then SIGKILL after stop_seconds) and start it with the new attempt's variables."""
        old = self.child
        if old.poll() is None:
            old.terminate()
            try:
                old.wait(self.stop_seconds)
            except subprocess.TimeoutExpired:
                old.kill()
                old.wait()
        with self._lock:
            if self.stopping is not None:
                return  # the pod is going: no new child
            self.env = applied(self.env, attempt.get("env") or {})
            self.child = self._start(self.command, env=self.env)
            if self.stopping is not None:  # the signal came while the child was being started
                self.child.send_signal(self.stopping)
        self.reporter = Reporter(context(self.env), min_interval=self.poll, background=False)
        self.restarts += 1
        _say("restarted_in_place", restart_count=self.reporter.ctx.restart_count,
             resume_step=self.reporter.ctx.resume_step)

    def run(self) -> int:
        while True:
            try:
                code = self.child.wait(self.poll)
            except subprocess.TimeoutExpired:
                code = None
            if self.stopping is not None:
                if code is not None:
                    return exit_code(code)
                continue  # the child was told; its exit ends the supervisor
            attempt = self.next_attempt() if code is None else self._after_exit()
            if attempt is not None:
                self.restart(attempt)
            elif code is not None:
                return exit_code(code)

    def _after_exit(self) -> dict[str, Any] | None:
        """The child ended on its own. A child that learnt its attempt is over (a stale report) may end before the
        operator has this pod marked as kept: while the operator says "stale" without a new attempt, ask again
        for up to stop_seconds (a pod being deleted gets SIGTERM meanwhile). Otherwise the child's exit is the
        pod's."""
        deadline = time.monotonic() + self.stop_seconds
        while True:
            attempt = self.next_attempt()
            if attempt is not None or not self.reporter.stale or self.stopping is not None or \
                    time.monotonic() >= deadline:
                return attempt
            time.sleep(self.poll)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        sys.stderr.write("usage: python -m railyard.worker.supervise -- COMMAND [ARGS ...]\n")
        return 2
    supervisor = Supervisor(args, os.environ)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, supervisor.forward)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
