"""The API surface the actors program against. `client.KubeApi` is the real one; the unit tests'
in-memory `tests/support/fakeapi.FakeApi` satisfies it too (mypy checks both against it).

Every write returns (or applies) what the API server stored, so callers update the state at once.
Errors: `client.ApiException` (the status the server answered), `client.Fenced` (this replica's
leadership term ended before the write left)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class ClusterApi(Protocol):
    async def patch_job_status(self, namespace: str, name: str, status: dict[str, Any],
                               resource_version: str | None = None) -> dict[str, Any] | None:
        """Merge-patch a TrainingJob's status, conditionally on `resource_version`; None: job gone."""
        ...

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def create(self, plural: str, body: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        """(True, stored) when created; (False, the existing object or None) on a name conflict."""
        ...

    async def create_dry_run(self, plural: str, body: dict[str, Any]) -> None:
        """POST with dryRun=All: every admission step runs (quota, PriorityClass, webhooks), nothing is stored.
        Raises ApiException as `create` would."""
        ...

    async def replace(self, plural: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """PUT the whole object; None when it does not exist."""
        ...

    async def release_pod(self, namespace: str, name: str, gate_index: int) -> dict[str, Any] | None: ...

    async def read(self, path: str) -> dict[str, Any] | None:
        """GET an object by its API path (None: it does not exist)."""
        ...

    async def patch_pod(self, namespace: str, name: str, uid: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        """A merge patch of a pod that is still the one of this uid (None: gone, or another pod by now)."""
        ...

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None,
                         grace_seconds: int | None = None) -> None: ...

    async def post_event(self, event: dict[str, Any], existing: bool = False) -> None: ...

    async def taint_node(self, name: str, taint: dict[str, str],
                         annotations: dict[str, str] | None = None) -> bool: ...

    async def lift_quarantine(self, name: str, taint_key: str, annotations: Sequence[str]) -> bool: ...
