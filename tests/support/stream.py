"""A fixed, seeded stream of jobs through the real operator loop over the in-memory API: arrivals of every
size and PriorityClass, required tiers, migratable and elastic gangs, lifetimes, node faults and returns,
starvation (the clock moves 10 s a tick). What it records after every tick — each job's Placed reason, attempt
and placement (ranks, nodes, GPUs) — is a trace whose digest says whether a change of the code changed a
decision (tests/unit/test_pass_digest.py; `python -m tests.support.stream SEED` prints it)."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import random
import sys

from railyard.operator.act.loop import PlacementLoop
from railyard.operator.cache.state import ClusterState

from tests.support.clock import ManualClock
from tests.support.clusters import profile_nodes
from tests.support.fakeapi import FakeApi
from tests.support.jobs import make_job
from tests.support.nodes import not_ready, ready
from tests.support.settings import settings

TICK = 10.0
STREAMS = ((1, 0), (2, 0), (3, 0), (4, 1), (5, 1))  # (seed, hot spares per TOR)
CLASSES = {"low": 10, "mid": 100, "high": 1000}


class Stream:
    def __init__(self, seed: int, spares: int = 0) -> None:
        self.rng = random.Random(seed)
        self.clock = ManualClock(wall=1_800_000_000.0)
        self.api = FakeApi(profile_nodes(spines=1, leaves=2, tors=2, nodes=4))
        for name, value in CLASSES.items():
            self.api._store("priorityclasses", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                "metadata": {"name": name}, "value": value}, "ADDED")
        self.state = ClusterState(clock=self.clock)
        for kind in self.state.kinds:
            items, rv = self.api.listing(kind)
            self.state.replace(kind, items, rv)
        self.api.log.clear()
        # Every feature that decides on its own: preemption (default on), defragmentation, reservations; no
        # solve budget (a slow machine would cut a pass short and change the trace).
        config = settings(defragmentation=True, loss_debounce_seconds=0, not_ready_debounce_seconds=0,
                          solve_budget_seconds=1e9, starvation_seconds=60, spares_per_tor=spares,
                          release_record_seconds=10.0)
        self.loop = PlacementLoop(self.state, self.api, config, lambda: True, clock=self.clock)
        self.events = asyncio.new_event_loop()  # one loop for the run: the actors' locks bind to it
        self.ends: dict[str, int] = {}  # job -> the tick its pods succeed
        self.dark: dict[str, int] = {}  # node -> the tick it is Ready again
        self.jobs = 0
        self.trace: list[str] = []

    def deliver(self) -> None:
        for kind, event, obj in list(self.api.log):
            self.state.apply(kind, event, obj)
        self.api.log.clear()

    def submit(self, tick: int) -> None:
        rng = self.rng
        replicas = rng.choice([1, 1, 2, 2, 3, 4, 6, 8])
        gpus = rng.choice([8, 8, 4])
        tier = rng.choice([None, None, "tor", "leaf"])
        body = make_job(f"j{self.jobs:03d}", replicas, gpus=gpus, topology={"requiredTier": tier} if tier else None,
                        preemption={"migratable": rng.random() < 0.5, "backfillSpares": rng.random() < 0.3})
        if replicas >= 4 and rng.random() < 0.3:
            body["spec"]["minReplicas"] = replicas // 2
        if (choice := rng.choice([None, "low", "low", "mid", "high"])) is not None:
            body["spec"]["priorityClassName"] = choice
        self.api.create_job(body)
        self.ends[body["metadata"]["name"]] = tick + rng.randint(4, 14)
        self.jobs += 1

    def finish(self, tick: int) -> None:
        """Jobs whose lifetime is over: every pod of theirs succeeds."""
        for _, pod in sorted(self.api.objects["pods"].items()):
            job = pod["metadata"]["labels"].get("railyard.dev/job-name")
            if job in self.ends and self.ends[job] <= tick and pod["spec"].get("nodeName") \
                    and pod["status"].get("phase") != "Succeeded":
                pod = copy.deepcopy(pod)
                pod["status"]["phase"] = "Succeeded"
                self.api._store("pods", pod, "MODIFIED")

    def fault(self, tick: int) -> None:
        """Now and then a node holding pods goes dark for a few ticks; dark nodes come back."""
        for node, back in sorted(self.dark.items()):
            if back <= tick:
                ready(self.api, self.state, node)
                del self.dark[node]
        if tick % 7 == 3:
            busy = sorted({p["spec"]["nodeName"] for p in self.api.objects["pods"].values()
                           if p["spec"].get("nodeName")} - set(self.dark))
            if busy:
                node = self.rng.choice(busy)
                not_ready(self.api, self.state, node)
                self.dark[node] = tick + self.rng.randint(2, 6)

    def record(self, tick: int) -> None:
        for (_, name), body in sorted(self.api.objects["trainingjobs"].items()):
            status = body.get("status") or {}
            placed = next((c["reason"] for c in status.get("conditions") or [] if c["type"] == "Placed"), None)
            ranks = sorted((r["rank"], r["node"], tuple(r["gpus"])) for r in
                            ((status.get("placement") or {}).get("ranks") or []))
            self.trace.append(json.dumps([tick, name, placed, status.get("restartCount", 0), ranks]))

    def tick(self, tick: int) -> None:
        self.clock.advance(TICK)
        if self.rng.random() < 0.6:
            self.submit(tick)
        self.finish(tick)
        self.fault(tick)
        self.deliver()
        for _ in range(2):
            self.events.run_until_complete(self.loop.run_once())
            self.deliver()
            self.api.bind_released()
            self.api.finish_terminating()
            self.deliver()
        self.record(tick)


def run(seed: int, ticks: int = 60, spares: int = 0) -> list[str]:
    stream = Stream(seed, spares)
    try:
        for tick in range(ticks):
            stream.tick(tick)
    finally:
        stream.events.close()
    return stream.trace


def digest(trace: list[str]) -> str:
    return hashlib.sha256("\n".join(trace).encode()).hexdigest()[:16]


def main() -> int:
    for seed, spares in STREAMS:
        trace = run(seed, spares=spares)
        print(json.dumps({"seed": seed, "spares": spares, "digest": digest(trace), "records": len(trace)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
