"""Runs the real operator (`railyard operator`, Kopf) as a subprocess for e2e tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.support.identity import Identity
from tests.support.poll import poll


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Listening ports come from below the kernel's ephemeral range: a port the kernel hands out (bind to 0) can be
# taken as the local port of any outgoing connection before the operator binds it (CI saw EADDRINUSE that way).
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
    def __init__(self, identity: Identity, lease_namespace: str, log_dir: Path, crash_after: str | None = None,
                 name: str = "op", extra_env: dict[str, str] | None = None) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.report_port = free_port()
        self.report_url = f"http://127.0.0.1:{self.report_port}/v1/reports"
        self.lease_namespace = lease_namespace
        identity.prepare(lease_namespace)  # the operator creates no namespaces
        env = {**os.environ, "KUBECONFIG": identity.kubeconfig, "RAILYARD_NAMESPACE": lease_namespace,
               "RAILYARD_METRICS_PORT": str(self.metrics_port),
               "RAILYARD_HEALTH_PORT": str(self.health_port), "RAILYARD_LEASE_SECONDS": "6",
               "RAILYARD_REPORT_PORT": str(self.report_port), "RAILYARD_REPORT_URL": self.report_url,
               "RAILYARD_REPORT_FLUSH_SECONDS": "1",
               "RAILYARD_RENEW_SECONDS": "1", "RAILYARD_RESYNC_SECONDS": "2",
               "RAILYARD_BIND_TIMEOUT_SECONDS": "60"}
        env.pop("RAILYARD_TEST_CRASH_AFTER", None)
        env.update(extra_env or {})
        if crash_after:
            env["RAILYARD_TEST_CRASH_AFTER"] = crash_after
        self.log_path = log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen([str(Path(sys.executable).parent / "railyard"), "operator"],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, kill: bool = False) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def wait_for_leader(coordination, namespace: str, timeout: float = 40) -> str:
    def holder() -> str | None:
        lease = coordination.read_namespaced_lease("railyard-operator", namespace)
        return lease.spec.holder_identity

    return poll(holder, timeout, f"a leader in {namespace}")


@contextlib.contextmanager
def running_operator(identity: Identity, coordination, core, log_dir: Path, name: str = "op",
                     extra_env: dict[str, str] | None = None, log_lines: int = 30) -> Iterator[OperatorProcess]:
    """An operator with its own Lease namespace, leading before the body runs; stopped (its log tail
    printed) and its namespace deleted after."""
    from kubernetes import client

    lease = f"railyard-e2e-{uuid.uuid4().hex[:6]}"
    op = OperatorProcess(identity, lease, log_dir, name=name, extra_env=extra_env)
    try:
        wait_for_leader(coordination, lease)
        yield op
    finally:
        op.stop()
        print(op.log_tail(log_lines))
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(lease)
