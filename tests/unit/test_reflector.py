"""The reflector's control flow with a scripted transport: a 410 in the watch means re-list, and a
re-list is delivered as one REPLACE carrying the list's resourceVersion."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from railyard.operator.kube.reflector import Reflector


class ScriptedApi:
    def __init__(self) -> None:
        self.lists = 0
        self.watched: list[str] = []
        self.done = threading.Event()

    def list_page(self, path, limit, cont):
        self.lists += 1
        rv = str(100 * self.lists)
        return {"metadata": {"resourceVersion": rv}, "items": [{"metadata": {"name": f"n{self.lists}"}}]}

    def watch(self, path, rv, timeout, silence=None):
        self.watched.append(rv)
        if len(self.watched) == 1:
            yield {"type": "ADDED", "object": {"metadata": {"name": "x", "resourceVersion": "101"}}}
            yield {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}
        else:
            self.done.set()
            yield from ()


def _reflect(api: Any) -> tuple[list, Reflector]:
    """Run a nodes reflector over `api` until it says it is done; what was delivered, and the reflector."""
    delivered: list = []
    loop = asyncio.new_event_loop()
    reflector = Reflector(api, "nodes", lambda *a: delivered.append(a), loop)
    reflector.start()
    assert api.done.wait(10)
    reflector.stop()
    loop.run_until_complete(asyncio.sleep(0.01))  # run the deliveries queued with call_soon_threadsafe
    loop.close()
    return delivered, reflector


def test_a_410_in_the_watch_means_a_fresh_list_then_a_watch_from_its_version():
    api = ScriptedApi()
    delivered, _ = _reflect(api)
    assert api.lists == 2 and api.watched[:2] == ["100", "200"]
    kinds = [(d[1], d[3]) for d in delivered]
    assert kinds[:3] == [("REPLACE", 100), ("ADDED", None), ("REPLACE", 200)]


class DroppingApi:
    """A watch that drops its connection once, then one that stays quiet; a malformed object in the list."""

    def __init__(self) -> None:
        self.lists = 0
        self.watched: list[str] = []
        self.done = threading.Event()

    def list_page(self, path, limit, cont):
        self.lists += 1
        return {"metadata": {"resourceVersion": "100"},
                "items": [{"metadata": {"name": "good"}}, "not an object"]}

    def watch(self, path, rv, timeout, silence=None):
        self.watched.append(rv)
        if len(self.watched) == 1:
            yield {"type": "ADDED", "object": {"metadata": {"name": "x", "resourceVersion": "105"}}}
            raise ConnectionResetError("connection reset by peer")
        self.done.set()
        yield from ()


def test_a_dropped_watch_resumes_from_the_last_version_and_a_bad_object_is_skipped():
    api = DroppingApi()
    delivered, reflector = _reflect(api)
    assert api.lists == 1, "a transport error is no reason to list again"
    assert api.watched[:2] == ["100", "105"], "the watch resumed where it was"
    replace = next(d for d in delivered if d[1] == "REPLACE")
    assert [o["metadata"]["name"] for o in replace[2]] == ["good"], "the malformed object was skipped"
    assert reflector.last_rv == 105


class QuietApi:
    def __init__(self, store_rv: str) -> None:
        self.store_rv = store_rv
        self.lists = 0

    def list_page(self, path, limit, cont):
        self.lists += 1
        return {"metadata": {"resourceVersion": self.store_rv}, "items": []}

    def watch(self, path, rv, timeout, silence=None):
        yield from ()


def test_catching_up_lists_again_only_when_the_watch_has_not_reached_the_quorum_version():
    loop = asyncio.new_event_loop()
    api = QuietApi("500")
    reflector = Reflector(api, "nodes", lambda *a: None, loop)
    reflector.last_rv = 500
    assert reflector.catch_up(wait=0.1) == "watch" and api.lists == 1, "one limit=1 read, nothing more"
    reflector.last_rv = 400  # a quiet kind: no event since the store moved on
    assert reflector.catch_up(wait=0.1) == "re-listed" and api.lists == 3
    loop.close()


class BurstApi:
    """A list, then a thousand events in one go."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.watched = 0

    def list_page(self, path, limit, cont):
        return {"metadata": {"resourceVersion": "1"}, "items": []}

    def watch(self, path, rv, timeout, silence=None):
        self.watched += 1
        if self.watched == 1:
            for i in range(1000):
                yield {"type": "MODIFIED", "object": {"metadata": {"name": f"p{i}", "resourceVersion": str(2 + i)}}}
        self.done.set()
        yield from ()


class CountingLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self.wakes = 0

    def call_soon_threadsafe(self, *args, **kwargs):
        self.wakes += 1
        return super().call_soon_threadsafe(*args, **kwargs)


def test_events_that_arrive_while_the_loop_is_busy_are_applied_in_order_after_one_wake_up():
    api = BurstApi()
    delivered: list = []
    loop = CountingLoop()
    reflector = Reflector(api, "nodes", lambda *a: delivered.append(a), loop)
    reflector.start()
    assert api.done.wait(10)  # the loop has not run yet: everything so far is queued
    reflector.stop()
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()
    assert [d[1] for d in delivered[:2]] == ["REPLACE", "MODIFIED"]
    assert [d[2]["metadata"]["name"] for d in delivered[1:]] == [f"p{i}" for i in range(1000)]
    assert loop.wakes == 1, f"woken {loop.wakes} times for one batch"


class StreamingApi:
    """An API server that streams lists (WatchList), or one that does not (`answer`: what a streaming list
    request gets: "stream", "refused" (422), or "legacy" (a plain watch: objects, then an ordinary bookmark))."""

    streams_lists = True

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.pages = 0
        self.watched: list[str] = []
        self.done = threading.Event()

    def list_page(self, path, limit, cont):
        self.pages += 1
        return {"metadata": {"resourceVersion": "70"}, "items": [{"metadata": {"name": "paged"}}]}

    def watch(self, path, rv, timeout, silence=None):
        from railyard.operator.kube.client import ApiException

        self.watched.append(rv)
        if rv == "":
            if self.answer == "refused":
                raise ApiException(status=422, reason="sendInitialEvents is forbidden")
            yield {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "41"}}}
            yield {"type": "ADDED", "object": {"metadata": {"name": "b", "resourceVersion": "42"}}}
            annotations = {"k8s.io/initial-events-end": "true"} if self.answer == "stream" else {}
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "50", "annotations": annotations}}}
            return
        self.done.set()
        yield from ()


def test_a_streaming_list_is_one_replace_at_its_bookmark_and_the_watch_goes_on_from_there():
    api = StreamingApi("stream")
    delivered, reflector = _reflect(api)
    assert reflector.streaming is True
    assert api.pages == 0, "no page-by-page list"
    assert api.watched[:2] == ["", "50"]
    (_, kind, items, rv), *_ = delivered
    assert kind == "REPLACE" and rv == 50 and [i["metadata"]["name"] for i in items] == ["a", "b"]


def test_an_api_server_that_refuses_or_does_not_mark_a_streaming_list_is_listed_page_by_page():
    for answer in ("refused", "legacy"):
        api = StreamingApi(answer)
        delivered, reflector = _reflect(api)
        assert reflector.streaming is False, answer
        assert api.pages == 1 and api.watched[:2] == ["", "70"], answer
        (_, kind, items, rv), *_ = delivered
        assert kind == "REPLACE" and rv == 70 and [i["metadata"]["name"] for i in items] == ["paged"], answer


def test_a_list_asked_for_in_the_leaders_term_is_its_catch_up_and_one_asked_before_is_not():
    loop = asyncio.new_event_loop()
    api = QuietApi("500")
    reflector = Reflector(api, "nodes", lambda *a: None, loop)
    began = time.monotonic()
    reflector._list()  # asked for after the term began
    assert api.lists == 1
    assert reflector.catch_up(wait=0.1, term_began=began) == "listed in this term" and api.lists == 1, \
        "nothing read again"
    api.store_rv = "600"  # the store moved on; this kind saw nothing of it
    assert reflector.catch_up(wait=0.1, term_began=time.monotonic()) == "re-listed", \
        "a list from before the term is no fresh read of it"
    assert api.lists == 3
    loop.close()
