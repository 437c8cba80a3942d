"""The leader's mark on its own pod: `railyard.dev/role=leader`, set when this replica becomes the
leader and removed when its term ends. The reports Service selects it, so workers reach the leader
only (a standby would answer 503). A replica that dies keeps the label on a pod that is gone or not
Ready, which the Service drops by itself; a standby whose term ended while it was partitioned
removes it once it can reach the API server again."""

from __future__ import annotations

import logging
from typing import Any, Protocol

log = logging.getLogger("railyard.leader")

ROLE_LABEL = "railyard.dev/role"
LEADER = "leader"


class PodPatcher(Protocol):
    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: list[tuple[str, str]] | None = None, timeout: float | None = None) -> Any: ...


class LeaderLabel:
    def __init__(self, api: PodPatcher, namespace: str, pod_name: str) -> None:
        self.api, self.namespace, self.pod_name = api, namespace, pod_name

    @property
    def enabled(self) -> bool:
        return bool(self.namespace and self.pod_name)

    def mark(self, leader: bool) -> None:
        """Set or remove the label (a merge patch: null removes). Called from the elector's thread."""
        if not self.enabled:
            return
        body = {"metadata": {"labels": {ROLE_LABEL: LEADER if leader else None}}}
        try:
            self.api.request("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{self.pod_name}", body,
                             content_type="application/merge-patch+json", timeout=5)
        except Exception as e:  # the Service is a convenience: a standby still answers 503
            log.warning("could not %s the leader label on pod %s/%s: %s", "set" if leader else "remove",
                        self.namespace, self.pod_name, e)
