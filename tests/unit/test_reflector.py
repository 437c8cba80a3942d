"""The reflector's control flow with a scripted transport: a 410 in the watch means re-list, and a
re-list is delivered as one REPLACE carrying the list's resourceVersion."""

from __future__ import annotations

import asyncio
import threading

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


def test_a_410_in_the_watch_means_a_fresh_list_then_a_watch_from_its_version():
    api = ScriptedApi()
    delivered: list = []
    loop = asyncio.new_event_loop()
    reflector = Reflector(api, "nodes", lambda *a: delivered.append(a), loop)
    reflector.start()
    assert api.done.wait(10)
    reflector.stop()
    loop.run_until_complete(asyncio.sleep(0.01))  # run the deliveries queued with call_soon_threadsafe
    loop.close()
    assert api.lists == 2 and api.watched[:2] == ["100", "200"]
    kinds = [(d[1], d[3]) for d in delivered]
    assert kinds[:3] == [("REPLACE", 100), ("ADDED", None), ("REPLACE", 200)]
