"""The operator's one client module: every Kubernetes API call goes through here (an import-linter
contract keeps the `kubernetes` package out of every other operator module).

- Requests are plain JSON: the generated models' (de)serialisation costs more CPU than the request
  itself at hundreds of pods a second. The async methods (everything the placer sends) go from the
  event loop over async_http's aiohttp session; the synchronous ones (the CLI, the reflectors' list
  and watch, the elector) over the official client's connection pool.
- Every call has a timeout; nothing can hang the placement loop or the lease renewal.
- Writes are fenced: when a fence is set (the leader's term), a write is refused *right before it
  is sent* once the term has ended, so a replica that was frozen past its lease writes nothing.
- Each write returns the object the API server stored, so the caller can apply it to the state at
  once instead of waiting for the watch to echo it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from railyard.operator.base import metrics
from railyard.operator.base.keys import FIELD_MANAGER, SCHEDULING_GATE
from railyard.operator.kube.async_http import CONNECT_TIMEOUT, Endpoint, Transport, tls_context
from railyard.topology.api.job import GROUP, PLURAL, VERSION

log = logging.getLogger("railyard.api")

__all__ = ["ApiException", "ClusterAccessError", "Fenced", "KubeApi", "cli_connection", "load_config"]

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# create(): kinds outside the core group
_GROUP_PATHS = {"resourceclaims": "/apis/resource.k8s.io/v1",
                "endpointslices": "/apis/discovery.k8s.io/v1", "trainingjobs": "/apis/railyard.dev/v1alpha1"}


class Fenced(RuntimeError):
    """A write refused because this replica's leadership term has ended."""


def load_config(kubeconfig: str | None = None, pool: int = 64) -> client.ApiClient:
    try:
        if kubeconfig:
            raise config.ConfigException("explicit kubeconfig")
        config.load_incluster_config()
    except config.ConfigException:
        # Read $KUBECONFIG now: the client captures it at import time, which may be too early.
        config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"))
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = pool
    return client.ApiClient(cfg)


class ClusterAccessError(RuntimeError):
    """The cluster could not be reached or used: no kubeconfig, an unknown context, an unreachable or
    refusing API server. The message is one line for a person (the CLI's exit code 3)."""


_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def cli_connection(kubeconfig: str | None, context: str | None) -> tuple[client.ApiClient, str]:
    """The client and default namespace kubectl would use: --kubeconfig, else $KUBECONFIG, else
    ~/.kube/config, at --context or the current context (its namespace, else "default"); inside a pod
    without a kubeconfig, the pod's service account and namespace."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser(config.KUBE_CONFIG_DEFAULT_LOCATION)
    first = path.split(os.pathsep)[0]
    if not kubeconfig and not os.path.exists(first) and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
        with open(_SA_NAMESPACE) as f:
            return client.ApiClient(client.Configuration.get_default_copy()), f.read().strip()
    if not os.path.exists(first):
        raise ClusterAccessError(f"no kubeconfig at {first}: set KUBECONFIG or pass --kubeconfig")
    cfg = client.Configuration()
    try:
        contexts, current = config.list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c["name"] == context), None) if context else current
        if chosen is None:
            names = ", ".join(sorted(c["name"] for c in contexts)) or "none"
            raise ClusterAccessError(f"context {context!r} is not in {first} (contexts: {names})")
        config.load_kube_config(config_file=path, context=chosen["name"], client_configuration=cfg)
    except (config.ConfigException, OSError, ValueError, TypeError, KeyError) as e:
        raise ClusterAccessError(f"{first}: {_one_line(e)}") from None
    cfg.connection_pool_maxsize = 8
    cfg.retries = 1  # a person waits: one retry, not urllib3's three, before "cannot reach"
    return client.ApiClient(cfg), (chosen.get("context") or {}).get("namespace") or "default"


def access_failure(e: BaseException, server: str) -> ClusterAccessError | None:
    """`e` as one line when it is the cluster refusing or not answering (else None: a bug)."""
    if isinstance(e, ApiException):
        if e.status in (401, 403):
            detail = ""
            with contextlib.suppress(Exception):
                detail = orjson.loads(e.body or b"{}").get("message", "")
            said = f": {detail}" if detail else ""
            return ClusterAccessError(f"{server} refused the request ({e.status} {e.reason}){said}")
        return ClusterAccessError(f"{server} answered {e.status} {e.reason}: {_one_line(e.body or '')}")
    import urllib3.exceptions

    if isinstance(e, urllib3.exceptions.HTTPError | OSError):
        reason = getattr(e, "reason", None) or e
        return ClusterAccessError(f"cannot reach the API server {server}: {_one_line(reason)}")
    return None


def _one_line(e: object) -> str:
    text = str(e).strip().splitlines()
    return text[-1] if text else type(e).__name__


def _endpoint(cfg: client.Configuration) -> Endpoint:
    """The official configuration's server, TLS, credentials and proxy, for the async transport."""
    tls = tls_context(cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file, cfg.assert_hostname is not False) \
        if cfg.verify_ssl else False
    # Asked per request, as the official client does: the configuration's hook refreshes a rotated token.
    token = lambda: cfg.get_api_key_with_prefix("BearerToken", alias="authorization")  # noqa: E731
    return Endpoint(cfg.host, tls, token, cfg.proxy or None, cfg.tls_server_name or None)


def _resource_of(path: str) -> str:
    """The resource a path names, for bounded metric labels ("pods", "trainingjobs/status", ...)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts:
        i = parts.index("namespaces")
        rest = parts[i + 2:] if len(parts) > i + 2 else ["namespaces"]
    else:
        rest = parts[2:] if parts and parts[0] == "api" else parts[3:]
    if not rest:
        return "unknown"
    return rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"


class KubeApi:
    streams_lists = True  # watch(path, "") lists by a stream (kube/reflector.py)

    def __init__(self, workers: int = 24, api_client: client.ApiClient | None = None,
                 read_timeout: float = 30.0, user_agent: str | None = None, kubeconfig: str | None = None) -> None:
        self.api = api_client or load_config(kubeconfig, pool=max(16, workers + 8))
        if user_agent:
            self.api.user_agent = user_agent
        self.read_timeout = read_timeout
        self.workers = workers
        self.fence: Callable[[], bool] | None = None
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="railyard-api")
        self._transport: Transport | None = None  # the async methods' (made on first use)
        self._writes = 0  # writes sent and not yet answered
        self._writes_lock = threading.Lock()

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    # --- raw requests ---------------------------------------------------------------------------------

    def _send(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
              query: list[tuple[str, str]] | None = None, timeout: float | None = None, stream: bool = False):
        # The body goes to the REST client as is (it JSON-encodes it): the generated client's sanitising
        # walk over every dict and list is for its model classes, which Railyard never sends.
        _, url, headers, _, _ = self.api.param_serialize(
            method=method, resource_path=path, query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=None, auth_settings=["BearerToken"])
        headers["User-Agent"] = self._agent(method, path)
        with self._in_flight(method):
            return self.api.call_api(method, url, header_params=headers, body=body,
                                     _request_timeout=(CONNECT_TIMEOUT, timeout or self.read_timeout))

    @contextlib.contextmanager
    def _in_flight(self, method: str) -> Iterator[None]:
        """Counts the writes sent and not yet answered (what `drain` waits for)."""
        if method not in WRITE_VERBS:
            yield
            return
        self._count_writes(1)
        try:
            yield
        finally:
            self._count_writes(-1)

    def _agent(self, method: str, path: str) -> str:
        """The User-Agent of a request about to be sent, counting it; a write is fenced here."""
        agent = self.api.user_agent
        if method in WRITE_VERBS and self.fence is not None:
            # Checked as the last step before sending. A process frozen right after this check still
            # sends on waking (the window every lease-based fence has); the User-Agent says when the
            # check passed, so the API server's audit log can tell such a write from a stale decision.
            checked = time.time()
            if not self.fence():
                metrics.FENCED_WRITES.inc()
                raise Fenced(f"{method} {path}: leadership term ended; write not sent")
            agent = f"{agent} fence-checked/{checked:.6f}"  # µs: ms rounding could date a check after a freeze
        metrics.API_REQUESTS.labels(method, _resource_of(path)).inc()
        return agent

    async def arequest(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                       query: list[tuple[str, str]] | None = None, timeout: float | None = None) -> dict[str, Any]:
        """`request` from the event loop, without a thread (async_http says why)."""
        if self._transport is None:
            self._transport = Transport(_endpoint(self.api.configuration), self.workers)
        data = None if body is None else orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)

        def headers() -> dict[str, str]:  # once a connection slot is had: the fence is the last step
            return {"Content-Type": content_type, "User-Agent": self._agent(method, path)}

        sending = self._transport.send(method, path, data, headers, query or [], timeout or self.read_timeout)
        if method in WRITE_VERBS:
            # A write, once decided, is sent whole even when its caller is cancelled (a leader stepping
            # down cancels its tasks, then drains): as in a thread, it runs on and `drain` waits for it,
            # counted from now (a write still waiting for a slot is refused by the fence when it gets one).
            self._count_writes(1)
            write = asyncio.ensure_future(sending)
            write.add_done_callback(self._write_done)
            status, reason, raw = await asyncio.shield(write)
        else:
            status, reason, raw = await sending
        return _decoded(status, reason, raw)

    def _count_writes(self, change: int) -> None:
        with self._writes_lock:
            self._writes += change

    def _write_done(self, write: asyncio.Future[Any]) -> None:
        """A write whose caller was cancelled has nobody to raise to: its error is logged here instead of
        as an unretrieved task exception (a caller still waiting gets the error as well)."""
        self._count_writes(-1)
        if not write.cancelled() and (error := write.exception()) is not None:
            log.debug("write ended in %s: %s", type(error).__name__, error)

    async def aclose(self) -> None:
        """Close the calling loop's connections."""
        if self._transport is not None:
            await self._transport.close()

    async def drain(self, timeout: float) -> int:
        """Wait until no write of this client is in flight (a leader stepping down lets what it sent
        land before it hands the Lease on); the number still in flight at the deadline."""
        deadline = time.monotonic() + timeout
        while self._writes and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self._writes

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: list[tuple[str, str]] | None = None, timeout: float | None = None) -> dict[str, Any]:
        response = self._send(method, path, body, content_type, query, timeout)
        return _decoded(response.status, response.reason, response.read())

    def list_all(self, path: str, query: list[tuple[str, str]] | None = None,
                 on_page: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
        """Every item of a collection, page by page (synchronous, the CLI's); `on_page` gets the count so far."""
        items: list[dict[str, Any]] = []
        cont: str | None = None
        while cont != "":
            page = self.list_page(path, 500, cont, extra=query)
            items.extend(page.get("items") or [])
            (on_page or (lambda _: None))(len(items))
            cont = page["metadata"].get("continue") or ""
        return items

    # --- list + watch (the reflector's transport; runs on the reflector's own thread) ----------------

    def list_page(self, path: str, limit: int, cont: str | None, timeout: float = 60.0,
                  extra: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        query = [*(extra or []), ("limit", str(limit)), *([("continue", cont)] if cont else [])]
        return self.request("GET", path, query=query, timeout=timeout)

    def watch(self, path: str, resource_version: str, timeout_seconds: int,
              silence_seconds: float | None = None) -> Iterator[dict[str, Any]]:
        """Watch events (parsed JSON lines) from `resource_version` ("": every object first, from the watch cache,
        then a bookmark marking their end: a streaming list); ends when the server closes the stream. The read
        timeout is between two reads: a stream silent for `silence_seconds` (no event, no bookmark) raises."""
        since = [("resourceVersion", resource_version)] if resource_version else \
            [("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan")]
        query = [("watch", "true"), *since, ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_seconds))]
        response = self._send("GET", path, query=query, timeout=silence_seconds or timeout_seconds + 30)
        raw = response.response
        try:
            if response.status >= 400:
                data = raw.read()
                raise ApiException(status=response.status, reason=response.reason,
                                   body=data.decode(errors="replace"))
            pending = b""
            for chunk in raw.stream(65536, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)  # several times faster: pod events are 5-8 KB each
        finally:
            raw.release_conn()

    # --- TrainingJobs -----------------------------------------------------------------------------

    async def patch_job_status(self, namespace: str, name: str, status: dict[str, Any],
                               resource_version: str | None = None) -> dict[str, Any] | None:
        """Merge-patch the status. With `resource_version` the write is conditional: a 409 (someone
        wrote since we read) propagates so the caller re-reads and re-decides. None: job deleted."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            return await self.arequest("PATCH", path, body, "application/merge-patch+json",
                                       [("fieldManager", FIELD_MANAGER)])
        except ApiException as e:
            if e.status == 404:
                return None  # deleted meanwhile
            raise

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
            return await self.arequest("GET", path)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    # --- pods, services, events ---------------------------------------------------------------------

    async def create(self, plural: str, body: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        """(True, stored object) when created; (False, the existing object) on a name conflict, so the
        caller can tell its own earlier creation from someone else's object."""
        ns, name = body["metadata"]["namespace"], body["metadata"].get("name")
        path = f"{_GROUP_PATHS.get(plural, '/api/v1')}/namespaces/{ns}/{plural}"
        try:
            return True, await self.arequest("POST", path, body, query=[("fieldManager", FIELD_MANAGER)])
        except ApiException as e:
            if e.status != 409 or not name:
                raise
        try:
            return False, await self.arequest("GET", f"{path}/{name}")
        except ApiException as e:
            if e.status == 404:
                return False, None  # deleted between the two calls: the next iteration retries
            raise

    async def create_dry_run(self, plural: str, body: dict[str, Any]) -> None:
        ns = body["metadata"]["namespace"]
        path = f"{_GROUP_PATHS.get(plural, '/api/v1')}/namespaces/{ns}/{plural}"
        await self.arequest("POST", path, body, query=[("fieldManager", FIELD_MANAGER), ("dryRun", "All")])

    async def replace(self, plural: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """PUT the whole object, unconditionally (its writer owns it: last write wins); None when it
        does not exist (the caller creates it)."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        path = f"{_GROUP_PATHS.get(plural, '/api/v1')}/namespaces/{ns}/{plural}/{name}"
        try:
            return await self.arequest("PUT", path, body, query=[("fieldManager", FIELD_MANAGER)])
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def read(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.arequest("GET", path)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def patch_pod(self, namespace: str, name: str, uid: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        body = {**patch, "metadata": {**patch.get("metadata", {}), "uid": uid}}  # refused for another pod (409/422)
        try:
            return await self.arequest("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", body,
                                       "application/merge-patch+json", [("fieldManager", FIELD_MANAGER)])
        except ApiException as e:
            if e.status in (404, 409, 422):
                return None
            raise

    async def release_pod(self, namespace: str, name: str, gate_index: int) -> dict[str, Any] | None:
        """Remove Railyard's scheduling gate: a JSON patch guarded by a test of the gate's name, so a
        pod whose gates changed is re-read instead of losing someone else's gate. Returns the pod."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        for _ in range(3):
            patch = [{"op": "test", "path": f"/spec/schedulingGates/{gate_index}/name", "value": SCHEDULING_GATE},
                     {"op": "remove", "path": f"/spec/schedulingGates/{gate_index}"}]
            try:
                return await self.arequest("PATCH", path, patch, "application/json-patch+json",
                                           [("fieldManager", FIELD_MANAGER)])
            except ApiException as e:
                if e.status != 422:
                    raise
            pod = await self.arequest("GET", path)
            gates = [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]
            if SCHEDULING_GATE not in gates:
                return pod  # already released
            gate_index = gates.index(SCHEDULING_GATE)
        raise RuntimeError(f"pod {namespace}/{name}: could not remove scheduling gate {SCHEDULING_GATE}")

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None,
                         grace_seconds: int | None = None) -> None:
        """Delete with the pod's own grace period (SIGTERM lets a trainer save), unless told otherwise;
        a uid precondition never deletes a successor that took the same name."""
        body: dict[str, Any] = {}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self.arequest("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body or None)
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    async def post_event(self, event: dict[str, Any], existing: bool = False) -> None:
        """Create an Event, or bump the count of the one with the same name (kube's aggregation)."""
        ns, name = event["metadata"]["namespace"], event["metadata"]["name"]
        path = f"/api/v1/namespaces/{ns}/events"
        try:
            if existing:
                patch = {"count": event["count"], "lastTimestamp": event["lastTimestamp"],
                         "message": event["message"]}
                try:
                    await self.arequest("PATCH", f"{path}/{name}", patch, "application/merge-patch+json")
                    return
                except ApiException as e:
                    if e.status != 404:
                        raise
            await self.arequest("POST", path, event)
        except (ApiException, Fenced) as e:  # events are best effort
            detail = e.body if isinstance(e, ApiException) and e.body else ""
            log.warning("could not post event %s: %s %s", event.get("reason"), getattr(e, "reason", e), detail[:300])

    async def taint_node(self, name: str, taint: dict[str, str], annotations: dict[str, str] | None = None) -> bool:
        """Add a taint (and annotations) unless the node already has a taint with that key. False: the
        node is gone."""
        def ops(node: dict[str, Any]) -> list[dict[str, Any]]:
            taints = (node.get("spec") or {}).get("taints")
            if any(t.get("key") == taint["key"] for t in taints or []):
                return []
            add = {"op": "add", "path": "/spec/taints/-", "value": taint} if taints is not None else \
                {"op": "add", "path": "/spec/taints", "value": [taint]}
            return [add, *_annotation_ops(node, annotations or {})]

        return await self._patch_node(name, ops, f"add taint {taint['key']}")

    async def lift_quarantine(self, name: str, taint_key: str, annotations: Sequence[str]) -> bool:
        """Remove the taint with this key and the annotations. False: the node is gone."""
        def ops(node: dict[str, Any]) -> list[dict[str, Any]]:
            taints = (node.get("spec") or {}).get("taints") or []
            out = [{"op": "remove", "path": f"/spec/taints/{i}"} for i in reversed(range(len(taints)))
                   if taints[i].get("key") == taint_key]
            held = (node.get("metadata") or {}).get("annotations") or {}
            out += [{"op": "remove", "path": f"/metadata/annotations/{_pointer(a)}"} for a in annotations if a in held]
            return out

        return await self._patch_node(name, ops, f"remove taint {taint_key}")

    async def _patch_node(self, name: str, ops: Callable[[dict[str, Any]], list[dict[str, Any]]], what: str) -> bool:
        """Read the node, build a JSON patch from it and send it guarded by the node's resourceVersion
        (no other writer's change is lost), re-reading on a conflict. An empty patch: nothing to do."""
        path = f"/api/v1/nodes/{name}"
        for _ in range(3):
            try:
                node = await self.arequest("GET", path)
            except ApiException as e:
                if e.status == 404:
                    return False
                raise
            changes = ops(node)
            if not changes:
                return True
            patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": node["metadata"]["resourceVersion"]},
                     *changes]
            try:
                await self.arequest("PATCH", path, patch, "application/json-patch+json",
                                    [("fieldManager", FIELD_MANAGER)])
                return True
            except ApiException as e:
                if e.status not in (409, 422):
                    raise
        raise RuntimeError(f"node {name}: could not {what} (kept changing)")

    # --- authentication (the report endpoint) -------------------------------------------------------

    async def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]:
        """TokenReview: the API server says whose token this is (status.user) for these audiences.
        Call it on a client without a fence (it changes nothing)."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": audiences}}
        path = "/apis/authentication.k8s.io/v1/tokenreviews"
        return (await self.arequest("POST", path, body)).get("status") or {}

    # --- Leases (used by the elector on its own KubeApi, never queued behind placement) ------------

    def lease_path(self, namespace: str, name: str | None = None) -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        return f"{base}/{name}" if name else base


def _decoded(status: int, reason: str, raw: bytes) -> dict[str, Any]:
    """A response's JSON body, or the API server's refusal as an ApiException (status, reason, body)."""
    if status >= 400:
        raise ApiException(status=status, reason=reason, body=raw.decode(errors="replace"))
    return orjson.loads(raw) if raw else {}


def _pointer(key: str) -> str:
    """A JSON-pointer path segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _annotation_ops(node: dict[str, Any], annotations: dict[str, str]) -> list[dict[str, Any]]:
    if not annotations:
        return []
    if (node.get("metadata") or {}).get("annotations") is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(annotations)}]
    return [{"op": "add", "path": f"/metadata/annotations/{_pointer(k)}", "value": v} for k, v in annotations.items()]

