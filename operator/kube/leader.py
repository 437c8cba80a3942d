"""Leader election on a coordination.k8s.io Lease: exactly one operator replica places at a time.

Kopf's peering only pauses operators; it is not a lock. As in client-go's leaderelection:
- the Lease is replaced with optimistic concurrency (resourceVersion), so two replicas can never both
  win the same term;
- another holder's lease counts as expired only when this replica has seen no change of the Lease
  record for leaseDurationSeconds, timed on this replica's own monotonic clock (never by comparing
  the other machine's renewTime with ours: clocks differ);
- our own term ends `lease_seconds * 0.8` after the start of the last successful renewal, so we stop
  (and fence our writes) before any other replica may take over.
The elector has its own client, thread pool and event loop on a thread of its own (`start`), with
short timeouts: renewal never waits behind placement writes or a long solve on the operator's loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from railyard.operator.base.clock import Clock, SystemClock
from railyard.operator.base.settings import LeaderSettings
from railyard.operator.kube.client import ApiException

log = logging.getLogger("railyard.leader")


class LeaseClient(Protocol):
    """What the elector calls (kube/client.KubeApi, on a client of its own)."""

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: list[tuple[str, str]] | None = None, timeout: float | None = None) -> dict[str, Any]: ...

    def lease_path(self, namespace: str, name: str | None = None) -> str: ...


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: LeaseClient, settings: LeaderSettings, on_elected: Callable[[], object],
                 clock: Clock | None = None, on_change: Callable[[bool], object] | None = None,
                 annotations: Mapping[str, str] | None = None) -> None:
        self.api = api
        # Written on the Lease by whoever holds it (what `railyard` commands read: keys.ANNOTATION_*).
        self.annotations = dict(annotations or {})
        self.clock = clock or SystemClock()
        self.settings = settings
        self.on_elected = on_elected
        # Told (on the elector's thread, blocking calls allowed) whenever leadership starts or ends.
        self.on_change = on_change
        self._announced = False
        self._valid_until = 0.0  # monotonic deadline of our current term
        self._observed: tuple[Any, ...] | None = None  # (holder, renewTime, resourceVersion) last seen
        self._observed_at = 0.0  # monotonic time we first saw that record
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.term_began: float | None = None  # monotonic, when the current (or last) term's lease write came back
        self.first_attempt = threading.Event()  # the first election attempt is over, won or not

    def is_leader(self) -> bool:
        return self.clock.monotonic() < self._valid_until

    def start(self) -> None:
        """Elect and renew on a thread with its own event loop. `on_elected` is called from that thread:
        hand it something thread-safe (loop.call_soon_threadsafe)."""
        self._stopping.clear()
        self._thread = threading.Thread(target=lambda: asyncio.run(self.run()), name="railyard-leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (the term then runs out, or `release` hands the Lease back)."""
        self._stopping.set()

    async def run(self) -> None:
        while not self._stopping.is_set():
            was_leader = self.is_leader()
            started = self.clock.monotonic()
            try:
                won = await asyncio.wait_for(self.api.run(self._try_acquire_or_renew),
                                             timeout=self.settings.renew_seconds * 2 + 2)
            except Exception as e:  # timeouts and API errors alike: the term just runs out
                log.warning("lease update failed: %s", e)
                won = None
            if won:
                self._valid_until = started + self.settings.lease_seconds * 0.8
                if not was_leader:
                    self.term_began = self.clock.monotonic()
                    log.info("became leader (%s)", self.settings.identity)
                    self.on_elected()
            elif won is False:
                if self._valid_until:  # we held a term (maybe already run out while we were frozen)
                    log.warning("lost leadership")
                self._valid_until = 0.0
            self.first_attempt.set()
            await self._announce()
            await asyncio.sleep(self.settings.renew_seconds)
        await self._announce()

    async def _announce(self) -> None:
        leader = self.is_leader() and not self._stopping.is_set()
        if self.on_change is None or leader == self._announced:
            return
        self._announced = leader
        try:
            await asyncio.wait_for(self.api.run(self.on_change, leader), timeout=self.settings.renew_seconds + 5)
        except Exception as e:  # a hook's trouble never costs the term
            log.warning("leadership change hook failed: %s", e)

    async def release(self) -> None:
        """On shutdown hand the lease back at once, so a standby takes over without waiting it out
        (call it after the operator's in-flight writes have drained)."""
        self.stop()
        if not self.is_leader():
            return
        try:
            await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, self._release), timeout=5)
        except Exception as e:
            log.warning("could not release the lease: %s", e)
        self._valid_until = 0.0

    def _release(self) -> None:
        s = self.settings
        path = self.api.lease_path(s.namespace, s.lease_name)
        lease = self.api.request("GET", path, timeout=3)
        if (lease.get("spec") or {}).get("holderIdentity") != s.identity:
            return
        lease["spec"]["holderIdentity"] = None
        lease["spec"]["renewTime"] = None
        self.api.request("PUT", path, lease, timeout=3)

    def _expired(self, lease: dict[str, Any]) -> bool:
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), lease["metadata"].get("resourceVersion"))
        now = self.clock.monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if not spec.get("holderIdentity"):
            return True
        return now - self._observed_at > (spec.get("leaseDurationSeconds") or 15)

    def _try_acquire_or_renew(self) -> bool:
        """True: we hold the lease now. False: someone else does. Raises on API trouble."""
        s = self.settings
        path = self.api.lease_path(s.namespace, s.lease_name)
        now = _now_micro()
        timeout = max(1.0, s.renew_seconds)
        try:
            lease = self.api.request("GET", path, timeout=timeout)
        except ApiException as e:
            if e.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": s.lease_name, "namespace": s.namespace, "annotations": self.annotations},
                    "spec": {"holderIdentity": s.identity, "leaseDurationSeconds": int(s.lease_seconds),
                             "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
            try:
                self.api.request("POST", self.api.lease_path(s.namespace), body, timeout=timeout)
                return True
            except ApiException as e2:
                if e2.status == 409:
                    return False
                if e2.status == 404:  # the operator creates no namespaces (least privilege)
                    raise RuntimeError(f"namespace {s.namespace!r} (RAILYARD_NAMESPACE) does not exist: "
                                       "create it, or install with the Helm chart") from None
                raise
        spec = lease.setdefault("spec", {})
        mine = spec.get("holderIdentity") == s.identity
        if not mine and not self._expired(lease):
            return False
        if not mine:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
            spec["holderIdentity"] = s.identity
        spec["renewTime"] = now
        spec["leaseDurationSeconds"] = int(s.lease_seconds)
        if self.annotations:
            lease["metadata"]["annotations"] = {**(lease["metadata"].get("annotations") or {}), **self.annotations}
        try:
            self.api.request("PUT", path, lease, timeout=timeout)  # carries resourceVersion
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise
