"""Leader election on a coordination.k8s.io Lease: exactly one operator replica places at a time.

Kopf's peering only pauses operators; it is not a lock. The Lease is updated with optimistic
concurrency (resourceVersion), so two replicas can never both believe they won the same term.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException
from railyard.operator.kubeapi import KubeApi
from railyard.operator.settings import LeaderSettings

log = logging.getLogger("railyard.leader")


def _now() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    def __init__(self, api: KubeApi, settings: LeaderSettings, on_elected: Callable[[], None]) -> None:
        self.api = api
        self.settings = settings
        self.on_elected = on_elected
        self._valid_until = 0.0  # monotonic deadline of our current term

    def is_leader(self) -> bool:
        return time.monotonic() < self._valid_until

    async def run(self) -> None:
        await self._ensure_namespace()
        while True:
            was_leader = self.is_leader()
            try:
                started = time.monotonic()
                if await self.api.run(self._try_acquire_or_renew):
                    # A term lasts from the start of the successful request, minus a safety margin.
                    self._valid_until = started + self.settings.lease_seconds * 0.8
                    if not was_leader:
                        log.info("became leader (%s)", self.settings.identity)
                        self.on_elected()
                else:
                    if was_leader:
                        log.warning("lost leadership")
                    self._valid_until = 0.0
            except Exception as e:
                log.warning("lease update failed: %s", e)
            await asyncio.sleep(self.settings.renew_seconds)

    async def release(self) -> None:
        """On shutdown hand the lease back at once, so a standby takes over without waiting it out."""
        if not self.is_leader():
            return
        self._valid_until = 0.0
        try:
            await self.api.run(self._release)
        except Exception as e:
            log.warning("could not release the lease: %s", e)

    def _release(self) -> None:
        s = self.settings
        lease = self.api.coordination.read_namespaced_lease(s.lease_name, s.namespace)
        if lease.spec.holder_identity != s.identity:
            return
        lease.spec.holder_identity = None
        lease.spec.renew_time = None
        self.api.coordination.replace_namespaced_lease(s.lease_name, s.namespace, lease)

    async def _ensure_namespace(self) -> None:
        try:
            await self.api.run(self.api.core.create_namespace, {"metadata": {"name": self.settings.namespace}})
        except ApiException as e:
            if e.status not in (403, 409):
                raise

    def _try_acquire_or_renew(self) -> bool:
        s = self.settings
        coordination: client.CoordinationV1Api = self.api.coordination
        now = _now()
        try:
            lease = coordination.read_namespaced_lease(s.lease_name, s.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            body = {"metadata": {"name": s.lease_name, "namespace": s.namespace},
                    "spec": {"holderIdentity": s.identity, "leaseDurationSeconds": int(s.lease_seconds),
                             "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
            try:
                coordination.create_namespaced_lease(s.namespace, body)
                return True
            except ApiException as e2:
                if e2.status == 409:
                    return False
                raise
        spec = lease.spec
        holder = spec.holder_identity
        renewed = spec.renew_time
        expired = not holder or renewed is None or \
            (now - renewed).total_seconds() > (spec.lease_duration_seconds or 15)
        if holder != s.identity and not expired:
            return False
        if holder != s.identity:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
            spec.holder_identity = s.identity
        spec.renew_time = now
        spec.lease_duration_seconds = int(s.lease_seconds)
        try:
            coordination.replace_namespaced_lease(s.lease_name, s.namespace, lease)  # carries resourceVersion
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise
