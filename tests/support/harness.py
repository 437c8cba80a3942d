"""An operator over the in-memory API for unit tests of the decision core: the state listed, a loop on a
clock the test moves, and the steps a test takes (submit, deliver what the watch would, let
kube-scheduler bind, run a pass)."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from railyard.operator.act.loop import PlacementLoop
from railyard.operator.cache.state import ClusterState
from railyard.topology.cluster.dra_devices import STANDARD
from railyard.topology.cluster.nodes import node_from_object

from tests.support import status as cond
from tests.support.clock import ManualClock
from tests.support.clusters import profile_nodes
from tests.support.fakeapi import FakeApi
from tests.support.rig import load_hack_module
from tests.support.settings import settings as operator_settings


@dataclass
class Rig:
    api: FakeApi
    state: ClusterState
    loop: PlacementLoop
    clock: ManualClock = field(default_factory=ManualClock)

    def deliver(self) -> None:
        """The watch delivers everything that happened, in order."""
        for kind, event, obj in list(self.api.log):
            self.state.apply(kind, event, obj)
        self.api.log.clear()

    def submit(self, body: dict[str, Any]) -> None:
        self.api.create_job(body)
        self.deliver()

    def step(self, passes: int = 1) -> None:
        """Passes of the loop, each followed by what the watch tells."""
        for _ in range(passes):
            asyncio.run(self.loop.run_once())
            self.deliver()

    def running(self) -> None:
        """Place, let kube-scheduler bind what was released, see it Running."""
        self.step()
        self.api.bind_released()
        self.deliver()
        self.step()

    def succeed(self, job: str) -> None:
        """Every pod of one job exits 0 (phase Succeeded), and the watch tells."""
        for (_, name), pod in list(self.api.objects["pods"].items()):
            if name.startswith(f"{job}-"):
                pod = copy.deepcopy(pod)
                pod["status"]["phase"] = "Succeeded"
                self.api._store("pods", pod, "MODIFIED")
        self.deliver()

    def succeed_all(self) -> None:
        """Every pod's containers exit 0 (phase Succeeded), and the watch tells."""
        for pod in list(self.api.objects["pods"].values()):
            pod = copy.deepcopy(pod)
            pod["status"]["phase"] = "Succeeded"
            self.api._store("pods", pod, "MODIFIED")
        self.deliver()

    def pods_gone(self) -> None:
        """The kubelets finish every Terminating pod and the watch says so."""
        self.api.finish_terminating()
        self.deliver()

    def edit_spec(self, name: str, **changes: Any) -> None:
        """A user's edit of the job's spec (`kubectl edit`, `kubectl scale`): a new generation, and the watch tells."""
        body = copy.deepcopy(self.api.objects["trainingjobs"][("default", name)])
        body["spec"].update(changes)
        body["metadata"]["generation"] = body["metadata"].get("generation", 1) + 1
        self.api._store("trainingjobs", body, "MODIFIED")
        self.deliver()

    def status(self, name: str) -> dict[str, Any]:
        return self.api.objects["trainingjobs"][("default", name)].get("status") or {}

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        return cond.get(self.status(name).get("conditions"), type_)

    def reason(self, name: str, type_: str = cond.PLACED) -> str | None:
        return (self.condition(name, type_) or {}).get("reason")

    def nodes_of(self, name: str) -> list[str]:
        return [r["node"] for r in sorted(self.status(name)["placement"]["ranks"], key=lambda r: r["rank"])]

    def pods(self) -> set[str]:
        return {name for (_, name) in self.api.objects["pods"]}

    def taints(self, node: str) -> list[dict[str, Any]]:
        return self.api.objects["nodes"][("", node)]["spec"].get("taints") or []


def rig(nodes: int = 4, tors: int = 1, leaves: int = 1, dra: bool = False, publish_seconds: float = 0.0,
        **placement: Any) -> Rig:
    """A listed operator over `nodes` nodes per TOR; placement settings as given (debounces 0; metrics
    published after every pass unless `publish_seconds`).
    `dra`: the nodes' GPUs and NICs published in ResourceSlices (hack/dra_slices.py), read by the state."""
    clock = ManualClock(wall=1_800_000_000.0)
    api = FakeApi(profile_nodes(leaves=leaves, tors=tors, nodes=nodes))
    if dra:
        publisher = load_hack_module("dra_slices", "dra_slices.py")
        for node in api.objects["nodes"].values():
            for body in publisher.slices_for(node_from_object(node)):
                api._store("resourceslices", body, "ADDED")
    state = ClusterState(clock=clock, device_names=STANDARD if dra else None)
    for kind in state.kinds:
        items, rv = api.listing(kind)
        state.replace(kind, items, rv)
    api.log.clear()
    settings = operator_settings(**{"loss_debounce_seconds": 0, "not_ready_debounce_seconds": 0,
                                    "metrics_publish_seconds": publish_seconds, **placement})
    return Rig(api, state, PlacementLoop(state, api, settings, lambda: True), clock)
