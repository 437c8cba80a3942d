"""Fault-injection helpers shared by the fault-tolerance e2e tests."""

from __future__ import annotations

import contextlib

from kubernetes import client

from tests.support.jobs import pods_of
from tests.support.poll import poll


def ranks_of(pods: list[dict]) -> dict[str, str]:
    return {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"] for p in pods}


def bound_generation(api_client, core, namespace: str, job: str, n: int, gen: int = 1) -> list[dict]:
    return poll(lambda: (ps := [p for p in pods_of(api_client, core, namespace, job)
                                if p["metadata"]["name"].startswith(f"{job}.p{gen}-") and p["spec"].get("nodeName")])
                and len(ps) == n and ps, 120, f"{n} bound pods of generation {gen}")


def untaint(core, node: str, key: str) -> None:
    with contextlib.suppress(client.ApiException):
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in core.read_node(node).spec.taints or []
                  if t.key not in (key, "railyard.dev/unhealthy")]
        core.patch_node(node, {"spec": {"taints": taints or None}})


FAULT = {"key": "nvidia.com/gpu-xid-error", "value": "79", "effect": "NoExecute"}
