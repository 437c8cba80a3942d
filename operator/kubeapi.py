"""The operator's API calls (the I/O edge). Synchronous official client, run on a thread pool so
many pods are created and released concurrently."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from railyard.operator.labels import FIELD_MANAGER, SCHEDULING_GATE
from railyard.topology.api import GROUP, PLURAL, VERSION

log = logging.getLogger("railyard.api")


def load_config() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        # Read $KUBECONFIG now: the client captures it at import time, which may be too early.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = 64
    return client.ApiClient(cfg)


class KubeApi:
    def __init__(self, workers: int = 24, api_client: client.ApiClient | None = None) -> None:
        self.api = api_client or load_config()
        self.core = client.CoreV1Api(self.api)
        self.coordination = client.CoordinationV1Api(self.api)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="railyard-api")

    async def run(self, fn, *args, **kwargs) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    # --- raw requests ---------------------------------------------------------------------------------
    # Writes go out as plain JSON: the generated client's model (de)serialisation costs more CPU than
    # the request itself, and at hundreds of pods a second the operator is CPU-bound.

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        _, url, headers, payload, _ = self.api.param_serialize(
            method=method, resource_path=path, query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=payload)
        data = response.read()
        if response.status >= 400:
            raise ApiException(status=response.status, reason=response.reason, body=data.decode(errors="replace"))
        return json.loads(data) if data else {}

    # --- TrainingJobs -----------------------------------------------------------------------------

    async def patch_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any] | None:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"
        try:
            return await self.run(self.request, "PATCH", path, {"status": status}, "application/merge-patch+json",
                                  [("fieldManager", FIELD_MANAGER)])
        except ApiException as e:
            if e.status == 404:
                return None  # deleted meanwhile
            raise

    # --- pods and services ------------------------------------------------------------------------

    async def create_pod(self, pod: dict[str, Any]) -> bool:
        """True if created, False if it already existed (idempotent re-runs after a crash)."""
        return await self._create("pods", pod)

    async def create_service(self, service: dict[str, Any]) -> None:
        await self._create("services", service)

    async def create_event(self, event: dict[str, Any]) -> None:
        try:
            await self._create("events", event)
        except ApiException as e:  # events are best effort
            log.warning("could not post event %s: %s", event.get("reason"), e.reason)

    async def _create(self, plural: str, body: dict[str, Any]) -> bool:
        path = f"/api/v1/namespaces/{body['metadata']['namespace']}/{plural}"
        try:
            await self.run(self.request, "POST", path, body, query=[("fieldManager", FIELD_MANAGER)])
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise

    async def release_pod(self, namespace: str, name: str, gate_index: int) -> None:
        """Remove Railyard's scheduling gate: a JSON patch guarded by a test of the gate's name, so a
        pod whose gates changed is re-read instead of losing someone else's gate."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        for _ in range(3):
            patch = [{"op": "test", "path": f"/spec/schedulingGates/{gate_index}/name", "value": SCHEDULING_GATE},
                     {"op": "remove", "path": f"/spec/schedulingGates/{gate_index}"}]
            try:
                await self.run(self.request, "PATCH", path, patch, "application/json-patch+json",
                               [("fieldManager", FIELD_MANAGER)])
                return
            except ApiException as e:
                if e.status != 422:
                    raise
            pod = await self.run(self.request, "GET", path)
            gates = [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]
            if SCHEDULING_GATE not in gates:
                return  # already released
            gate_index = gates.index(SCHEDULING_GATE)
        raise RuntimeError(f"pod {namespace}/{name}: could not remove scheduling gate {SCHEDULING_GATE}")

    async def delete_pod(self, namespace: str, name: str) -> None:
        try:
            await self.run(self.request, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                           {"gracePeriodSeconds": 0})
        except ApiException as e:
            if e.status != 404:
                raise
