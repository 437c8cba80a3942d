"""List-then-watch reflectors (client-go's Reflector, in small): one thread per resource reads the
API server, the state is changed only on the event loop.

Why not Kopf's watch streams: Kopf re-lists after a watch restart but never says which objects
vanished meanwhile, and never says when the initial listing is complete; the placer needs both
(Replace semantics, and "place nothing before Nodes, Pods and TrainingJobs are listed"). Parsing
and slimming happen on the reflector's thread, so the event loop only applies small views.

- A list is streamed where the API server offers it (WatchList: a watch that sends every object from its
  watch cache, then a bookmark marking their end), else read page by page from etcd; a fresh operator's paged
  list of 100k pods outlasted the watch window it was to resume from, and listed again.
- A transport error (a dropped connection, a 5xx) resumes the watch from the last resourceVersion
  seen; only 410 Gone (or a list-level error) re-lists.
- A stream silent for `silence_seconds` (no event and no bookmark; the API server sends a bookmark
  about every minute) is taken as dead and resumed.
- An object the reflector cannot read is logged and skipped: one malformed object never stops the
  stream for the others.
- `catch_up`: a leader about to place first makes sure its view has passed a fresh quorum read.
- Deliveries queue on the reflector and the event loop is woken once per batch, not per event: a
  wake-up is a write to the loop's self-pipe, which cost more than applying the event itself when
  thousands of pod events a minute arrive one by one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from railyard.operator.base import metrics
from railyard.operator.base.objects import pod_view
from railyard.operator.cache.device_book import CLAIMS, SLICES, claim_view
from railyard.operator.cache.state import KINDS, ClusterState
from railyard.operator.kube.client import ApiException
from railyard.topology.api.job import GROUP, PLURAL, VERSION

log = logging.getLogger("railyard.reflector")

PATHS = {"nodes": "/api/v1/nodes", "pods": "/api/v1/pods", "trainingjobs": f"/apis/{GROUP}/{VERSION}/{PLURAL}",
         "priorityclasses": "/apis/scheduling.k8s.io/v1/priorityclasses",
         SLICES: "/apis/resource.k8s.io/v1/resourceslices", CLAIMS: "/apis/resource.k8s.io/v1/resourceclaims"}
TRANSFORMS: dict[str, Callable[[dict[str, Any]], Any]] = {"pods": pod_view, CLAIMS: claim_view}


INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # the bookmark annotation that ends a streaming list's objects


class ListWatch(Protocol):
    """What a reflector reads through (kube/client.KubeApi)."""

    def list_page(self, path: str, limit: int, cont: str | None, timeout: float = 60.0) -> dict[str, Any]: ...

    def watch(self, path: str, resource_version: str, timeout_seconds: int,
              silence_seconds: float | None = None) -> Iterator[dict[str, Any]]: ...


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): re-list."""


Sink = Callable[[str, str, Any, int | None], None]  # (kind, event type | "REPLACE", object(s), list rv)


class Reflector:
    def __init__(self, api: ListWatch, kind: str, sink: Sink, loop: asyncio.AbstractEventLoop,
                 page_size: int = 500, watch_seconds: int = 300, delay_events: float = 0.0,
                 silence_seconds: float = 90.0) -> None:
        self.api = api
        self.kind = kind
        self.path = PATHS[kind]
        self.transform = TRANSFORMS.get(kind, lambda body: body)
        self.sink = sink
        self.loop = loop
        self.page_size = page_size
        self.watch_seconds = watch_seconds
        self.delay_events = delay_events  # fault injection for tests: a lagging watch
        self.silence_seconds = silence_seconds
        self.last_rv = 0  # the newest resourceVersion delivered (events, bookmarks, lists)
        self._resume_at: str | None = None  # where an interrupted watch picks up
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lists = 0
        # When the newest complete list was asked for (monotonic): one asked after a term began is that term's
        # fresh quorum read already (catch_up).
        self.listed_asked_at: float | None = None
        self._asking_since = 0.0
        self.streaming: bool | None = None  # whether the API server streams lists (None: not asked yet)
        self._queued: list[tuple[str, Any, int | None]] = []  # in arrival order, applied by _apply_queued
        self._queued_lock = threading.Lock()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"railyard-reflector-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current request (watches end within `watch_seconds` at the latest)."""
        self._stop.set()

    def _run(self) -> None:
        backoff = 0.5
        rv: str | None = None  # None: list first
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                backoff = 0.5
                while not self._stop.is_set():
                    rv = self._watch(rv)
            except Expired:
                log.info("%s: watch expired; re-listing", self.kind)
                rv = None
            except ApiException as e:
                if e.status is None or e.status < 500:  # the request itself is refused: list afresh
                    rv = None
                log.warning("%s: list/watch failed (%s %s); retrying in %.1fs", self.kind, e.status, e.reason, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception as e:  # the connection dropped or went silent: resume from the last version
                rv = self._resume_at or rv
                log.warning("%s: watch interrupted (%s); resuming from %s in %.1fs", self.kind, e, rv, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _list(self) -> str:
        """A complete list, delivered as one REPLACE: streamed from the API server's watch cache where it can (a
        watch that sends every object, then a bookmark marking their end: no page-by-page read of etcd that a
        fresh operator's first watch could outlast), else page by page."""
        self._asking_since = time.monotonic()
        if getattr(self.api, "streams_lists", False) and self.streaming is not False:
            try:
                listed = self._stream()
            except ApiException as e:
                if e.status is None or e.status >= 500:
                    raise
                listed = None  # refused: an API server without streaming lists (WatchList)
            if listed is not None:
                self.streaming = True
                return listed
            if self.streaming is None:
                log.info("%s: the API server does not stream lists; listing page by page", self.kind)
                self.streaming = False
        return self._paged()

    def _stream(self) -> str | None:
        """The objects a streaming list sends, up to the bookmark that ends them; None when the stream says it
        is no streaming list (another bookmark first, or it ends without one)."""
        items: list[Any] = []
        for event in self.api.watch(self.path, "", self.watch_seconds, self.silence_seconds):
            kind, obj = event.get("type"), event.get("object") or {}
            meta = obj.get("metadata") or {}
            if kind == "ERROR":
                raise ApiException(status=obj.get("code"), reason=obj.get("message"))
            if kind == "BOOKMARK":
                if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) != "true":
                    return None
                self._listed(items, str(meta.get("resourceVersion") or ""))
                return str(meta.get("resourceVersion") or "")
            if kind == "ADDED" and (item := self._read(obj)) is not None:
                items.append(item)
        return None

    def _paged(self) -> str:
        items: list[Any] = []
        cont: str | None = None
        list_rv = ""
        while True:
            try:
                page = self.api.list_page(self.path, self.page_size, cont)
            except ApiException as e:
                if e.status == 410:  # continue token expired: start the list again
                    items, cont, list_rv = [], None, ""
                    continue
                raise
            list_rv = list_rv or page["metadata"]["resourceVersion"]
            items.extend(obj for obj in map(self._read, page.get("items") or []) if obj is not None)
            cont = page["metadata"].get("continue")
            if not cont:
                break
        self._listed(items, list_rv)
        return list_rv

    def _listed(self, items: list[Any], list_rv: str) -> None:
        self.lists += 1
        metrics.RELISTS.labels(self.kind).inc()
        self._deliver("REPLACE", items, int(list_rv) if list_rv.isdigit() else None)
        self._seen(list_rv)
        self._resume_at = list_rv
        self.listed_asked_at = self._asking_since

    def _read(self, obj: Any) -> Any:
        try:
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
                raise ValueError(f"not an API object: {str(obj)[:80]!r}")
            return self.transform(obj)
        except Exception:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            log.exception("%s: cannot read %s; skipping it", self.kind, (meta or {}).get("name"))
            return None

    def _seen(self, rv: str) -> None:
        if rv.isdigit():
            self.last_rv = max(self.last_rv, int(rv))

    def _watch(self, rv: str) -> str:
        for event in self.api.watch(self.path, rv, self.watch_seconds, self.silence_seconds):
            if self._stop.is_set():
                break
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Expired()
                raise ApiException(status=obj.get("code"), reason=obj.get("message"))
            rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
            self._resume_at = rv
            if kind != "BOOKMARK" and kind:
                payload = self._read(obj)
                if payload is not None:
                    self._deliver(kind, payload, None, self.delay_events)
            self._seen(rv)
        return rv

    def catch_up(self, wait: float = 2.0, term_began: float | None = None) -> str:
        """Blocking (run it on a worker thread): make this kind's view pass a fresh quorum read. A list asked
        for after the term began (`term_began`, monotonic) is one. Otherwise a consistent list of one object
        gives the store's current version R; if the watch has not delivered R within `wait` seconds (a quiet
        kind sees no events), list afresh. Returns how."""
        if term_began is not None and self.listed_asked_at is not None and self.listed_asked_at >= term_began:
            return "listed in this term"
        page = self.api.list_page(self.path, 1, None)
        target = str(page["metadata"].get("resourceVersion") or "")
        if not target.isdigit():
            self._list()
            return "re-listed"
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.last_rv >= int(target):
                return "watch"
            self._stop.wait(0.05)
        self._list()
        return "re-listed"

    def _deliver(self, kind: str, payload: Any, list_rv: int | None, delay: float = 0.0) -> None:
        if delay > 0:
            self.loop.call_soon_threadsafe(self.loop.call_later, delay, self.sink, self.kind, kind, payload, list_rv)
            return
        with self._queued_lock:
            self._queued.append((kind, payload, list_rv))
            if len(self._queued) > 1:  # the loop has been woken for this batch already
                return
        self.loop.call_soon_threadsafe(self._apply_queued)

    def _apply_queued(self) -> None:
        """On the event loop: apply every delivery queued so far, in order."""
        with self._queued_lock:
            batch, self._queued = self._queued, []
        for kind, payload, list_rv in batch:
            self.sink(self.kind, kind, payload, list_rv)


def reflector_sink(state: ClusterState, on_change: Callable[[], None]) -> Sink:
    """Apply one delivery to the state (on the event loop) and wake the placer."""
    counted = {k: metrics.WATCH_EVENTS.labels(k) for k in PATHS}  # a labels() lookup per event adds up

    def sink(kind: str, event_type: str, payload: Any, list_rv: int | None) -> None:
        try:
            if event_type == "REPLACE":
                state.replace(kind, payload, list_rv)
            else:
                state.apply(kind, event_type, payload)
                counted[kind].inc()
        except Exception:  # one malformed object must not stop the stream
            log.exception("%s: cannot apply %s", kind, event_type)
        on_change()
    return sink


__all__ = ["KINDS", "Reflector", "reflector_sink"]
