"""Evictions an admin asked for (kubectl drain, a node-maintenance tool), as the eviction webhook saw
them: pod -> when first seen. Written by the report endpoint's thread, read by the placement loop,
hence the lock. A request the webhook held (429) leaves no trace on any object, so this is the only place a
drain of a running gang shows before its pods are gone."""

from __future__ import annotations

import threading

Pod = tuple[str, str]  # (namespace, name)
KEEP_SECONDS = 900.0  # kubectl drain retries every 5 s: a request older than this is not a drain in progress
MOST = 100_000


class EvictionBook:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._seen: dict[Pod, float] = {}

    def note(self, pod: Pod, now: float) -> bool:
        """Record a request to evict `pod`; True when it is the first one in KEEP_SECONDS."""
        with self.lock:
            first = pod not in self._seen or now - self._seen[pod] > KEEP_SECONDS
            if first:
                if len(self._seen) >= MOST:
                    self._prune(now)
                self._seen[pod] = now
            return first

    def first_asked(self, pod: Pod) -> float | None:
        """When the eviction of `pod` now asked for was first asked for (None: never, or long ago)."""
        with self.lock:
            return self._seen.get(pod)

    def requested(self, namespace: str, now: float) -> frozenset[str]:
        """Pods of `namespace` with an eviction asked for in the last KEEP_SECONDS. Asked by every job
        on every pass: a few noted pods are scanned, never a gang's ranks (and nothing when none are)."""
        if not self._seen:
            return frozenset()
        with self.lock:
            return frozenset(name for (ns, name), at in self._seen.items()
                             if ns == namespace and now - at <= KEEP_SECONDS)

    def _prune(self, now: float) -> None:
        self._seen = {k: v for k, v in self._seen.items() if now - v <= KEEP_SECONDS}
        if len(self._seen) >= MOST:  # a flood: keep the newest half
            newest = sorted(self._seen.items(), key=lambda kv: kv[1])[MOST // 2:]
            self._seen = dict(newest)
