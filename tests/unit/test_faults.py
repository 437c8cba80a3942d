"""Which node signals make a job's ranks count as lost (pure)."""

from __future__ import annotations

import time

import pytest
from railyard.topology.faults import node_loss

NOW = time.time()


def stamp(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - seconds_ago))


def node(ready: str = "True", since: float = 3600, taints=(), conditions=(), gpus: str = "8") -> dict:
    return {"metadata": {"name": "n1"},
            "spec": {"taints": list(taints)},
            "status": {"allocatable": {"nvidia.com/gpu": gpus},
                       "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": stamp(since)},
                                      *conditions]}}


@pytest.mark.parametrize(("obj", "reason"), [
    (None, "NodeDeleted"),
    (node("False", since=45), "NodeNotReady"),
    (node("Unknown", since=31), "NodeNotReady"),
    (node(taints=[{"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoExecute"}]), "Taint"),
    (node(conditions=[{"type": "GpuNvlinkWatch", "status": "True", "message": "NVLink down"}]), "GpuFault"),
    (node(gpus="7"), "GpuAllocatableDropped"),
])
def test_each_signal_names_its_reason(obj, reason):
    loss = node_loss("n1", obj, 8, [], NOW, 30)
    assert loss is not None and loss.reason == reason, loss


@pytest.mark.parametrize("obj", [
    node(),  # healthy
    node("False", since=10),  # NotReady, still inside the grace period
    node("False", since=10, taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
    node(taints=[{"key": "nvidia.com/gpu-xid-error", "effect": "NoExecute"}]),  # tolerated below
    node(conditions=[{"type": "GpuNvlinkWatch", "status": "False"}]),
    node(gpus="8"),
])
def test_a_usable_node_or_one_inside_its_grace_is_not_lost(obj):
    tolerations = [{"key": "nvidia.com/gpu-xid-error", "operator": "Exists"}]
    assert node_loss("n1", obj, 8, tolerations, NOW, 30) is None


def test_a_node_holding_fewer_gpus_than_it_lost_is_still_fine():
    assert node_loss("n1", node(gpus="6"), 4, [], NOW, 30) is None
