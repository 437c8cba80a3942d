"""Runs the real operator (`railyard operator`, Kopf) for e2e tests, through the benchmarks' one launcher
(hack/bench/launcher.py)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

from bench.launcher import OperatorProcess as Launched
from bench.launcher import free_port

from tests.support.identity import Identity
from tests.support.poll import poll


class OperatorProcess(Launched):
    """An operator for e2e tests: the chart's ServiceAccount's token (so every test also proves the chart's RBAC
    is enough), its own Lease namespace, and the short timers a test can wait out."""

    def __init__(self, identity: Identity, lease_namespace: str, log_dir: Path, crash_after: str | None = None,
                 name: str = "op", extra_env: dict[str, str] | None = None) -> None:
        identity.prepare(lease_namespace)  # the operator creates no namespaces
        settings = {"RAILYARD_LEASE_SECONDS": "6", "RAILYARD_REPORT_FLUSH_SECONDS": "1", "RAILYARD_RENEW_SECONDS": "1",
                    "RAILYARD_RESYNC_SECONDS": "2", "RAILYARD_BIND_TIMEOUT_SECONDS": "60", **(extra_env or {})}
        if crash_after:
            settings["RAILYARD_TEST_CRASH_AFTER"] = crash_after
        super().__init__(identity.kubeconfig, lease_namespace, log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log",
                         settings)
        self.lease_namespace = lease_namespace


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


__all__ = ["OperatorProcess", "free_port", "running_operator", "wait_for_leader"]
