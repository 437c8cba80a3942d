"""A test's own node events on the in-memory API (what kubelets, admins and health agents do), each
delivered to the operator's state at once."""

from __future__ import annotations

import copy
import dataclasses

from railyard.operator.cache.state import ClusterState

from tests.support.fakeapi import FakeApi


def update_node(api: FakeApi, state: ClusterState, name: str, change) -> None:
    node = copy.deepcopy(api.objects["nodes"][("", name)])
    change(node)
    state.apply_node("MODIFIED", api._store("nodes", node, "MODIFIED"))


def not_ready(api: FakeApi, state: ClusterState, name: str, seen_ago: float = 3600.0) -> None:
    """The node's heartbeat stopped; the operator has seen it NotReady for `seen_ago` seconds."""
    def change(node: dict) -> None:
        for c in node["status"]["conditions"]:
            if c["type"] == "Ready":
                c.update(status="Unknown", lastTransitionTime="2026-01-01T00:00:00Z")

    update_node(api, state, name, change)
    health = state.health[name]
    assert health.not_ready_seen is not None
    state.health[name] = dataclasses.replace(health, not_ready_seen=health.not_ready_seen - seen_ago)


def ready(api: FakeApi, state: ClusterState, name: str) -> None:
    def change(node: dict) -> None:
        for c in node["status"]["conditions"]:
            if c["type"] == "Ready":
                c.update(status="True")

    update_node(api, state, name, change)


def cordon(api: FakeApi, state: ClusterState, name: str, on: bool = True) -> None:
    """kubectl cordon / uncordon: spec.unschedulable and the node controller's NoSchedule taint."""
    key = "node.kubernetes.io/unschedulable"

    def change(node: dict) -> None:
        node["spec"]["unschedulable"] = on
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != key]
        node["spec"]["taints"] = taints + ([{"key": key, "effect": "NoSchedule"}] if on else [])

    update_node(api, state, name, change)


def taint(api: FakeApi, state: ClusterState, name: str, key: str, effect: str, value: str = "") -> None:
    def change(node: dict) -> None:
        node["spec"]["taints"] = [*(node["spec"].get("taints") or []), {"key": key, "value": value, "effect": effect}]

    update_node(api, state, name, change)
