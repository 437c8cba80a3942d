"""The one way benchmarks and e2e tests start a real operator: `railyard operator` as a subprocess of this venv,
with its settings as RAILYARD_* variables, its listening ports chosen outside the kernel's ephemeral range (a
port the kernel hands out can be taken as the local port of an outgoing connection before the operator binds
it: CI saw EADDRINUSE that way), and its output in a log file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORT_FLOOR = 20000
_next_port = _PORT_FLOOR + (os.getpid() * 7) % max(1, _ephemeral_floor() - _PORT_FLOOR)


def free_port() -> int:
    """A port nothing listens on, outside the ephemeral range, never handed out twice by this process."""
    global _next_port
    ceiling = _ephemeral_floor()
    for _ in range(ceiling - _PORT_FLOOR):
        port = _next_port
        _next_port = _PORT_FLOOR + (_next_port + 1 - _PORT_FLOOR) % (ceiling - _PORT_FLOOR)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORT_FLOOR}..{ceiling}")


class OperatorProcess:
    """`railyard operator` against `kubeconfig`, its Lease in `namespace` (which must exist). Each port is
    free_port()'s unless given (0 turns that endpoint off); `settings` are more RAILYARD_* variables."""

    def __init__(self, kubeconfig: str | Path, namespace: str, log_path: Path,
                 settings: Mapping[str, str] | None = None, metrics_port: int | None = None,
                 health_port: int | None = None, report_port: int | None = None) -> None:
        self.metrics_port = free_port() if metrics_port is None else metrics_port
        self.health_port = free_port() if health_port is None else health_port
        self.report_port = free_port() if report_port is None else report_port
        self.report_url = f"http://127.0.0.1:{self.report_port}/v1/reports" if self.report_port else ""
        self.namespace = namespace
        self.log_path = log_path
        env = {key: value for key, value in os.environ.items() if key != "RAILYARD_TEST_CRASH_AFTER"}
        env.update({"KUBECONFIG": str(kubeconfig), "RAILYARD_NAMESPACE": namespace,
                    "RAILYARD_METRICS_PORT": str(self.metrics_port), "RAILYARD_HEALTH_PORT": str(self.health_port),
                    "RAILYARD_REPORT_PORT": str(self.report_port)})
        if self.report_url:
            env["RAILYARD_REPORT_URL"] = self.report_url
        env.update(settings or {})
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen([str(Path(sys.executable).parent / "railyard"), "operator"],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, kill: bool = False, timeout: float = 20.0) -> int:
        """SIGTERM (it hands its Lease back), or SIGKILL; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
