"""Which node signals make a job's ranks count as lost (pure): loss means loss — a cordon, a pressure
taint or Railyard's own quarantine never does; grace periods run from when the operator saw the
signal."""

from __future__ import annotations

import pytest
from railyard.topology.cluster.faults import NodeHealth, node_loss, read_health
from railyard.topology.cluster.labels import ANNOTATION_QUARANTINED_UNTIL

SEEN = 1000.0  # monotonic: when the operator saw this version of the node


def node(ready: str = "True", taints=(), conditions=(), gpus: str = "8", unschedulable: bool = False) -> dict:
    return {"metadata": {"name": "n1"},
            "spec": {"taints": list(taints), "unschedulable": unschedulable},
            "status": {"allocatable": {"nvidia.com/gpu": gpus},
                       "conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": "2020-01-01T00:00:00Z"}, *conditions]}}


def health(obj: dict, previous: NodeHealth | None = None, at: float = SEEN) -> NodeHealth:
    return read_health(obj, ANNOTATION_QUARANTINED_UNTIL).observed(previous, at)


@pytest.mark.parametrize(("obj", "after", "reason"), [
    (None, 0, "NodeDeleted"),
    (node("False"), 45, "NodeNotReady"),
    (node("Unknown"), 31, "NodeNotReady"),
    (node(taints=[{"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoExecute"}]), 0, "Taint"),
    (node(taints=[{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]),
     0, "OutOfService"),
    (node(conditions=[{"type": "GpuNvlinkWatch", "status": "True", "message": "NVLink down"}]), 0, "GpuFault"),
    (node(gpus="7"), 31, "GpuAllocatableDropped"),
])
def test_each_signal_names_its_reason(obj, after, reason):
    loss = node_loss("n1", health(obj) if obj is not None else None, 8, [], SEEN + after, 30)
    assert loss is not None and loss.reason == reason, loss


@pytest.mark.parametrize("obj", [
    node(),  # healthy
    node("False"),  # NotReady, still inside the grace period (seen 10 s ago)
    node("False", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
    node(taints=[{"key": "nvidia.com/gpu-xid-error", "effect": "NoExecute"}]),  # tolerated below
    node(conditions=[{"type": "GpuNvlinkWatch", "status": "False"}]),
    node(gpus="0"),  # a kubelet restart reports 0 for a moment: inside the grace
    # routine operations: none of them is a loss
    node(unschedulable=True, taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
    node(taints=[{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}]),
    node(taints=[{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]),
    node(taints=[{"key": "railyard.dev/unhealthy", "value": "NodeNotReady", "effect": "NoSchedule"}]),
    node(taints=[{"key": "example.com/maintenance", "effect": "NoSchedule"}]),
])
def test_a_usable_node_routine_operations_or_a_signal_inside_its_grace_are_not_a_loss(obj):
    tolerations = [{"key": "nvidia.com/gpu-xid-error", "operator": "Exists"}]
    assert node_loss("n1", health(obj), 8, tolerations, SEEN + 10, 30) is None


def test_a_node_holding_fewer_gpus_than_it_lost_is_still_fine():
    assert node_loss("n1", health(node(gpus="6")), 4, [], SEEN + 100, 30) is None


def test_grace_runs_from_when_the_operator_saw_the_signal_not_from_the_nodes_timestamps():
    # The node's lastTransitionTime says 2020: comparing it with this machine's clock would call the
    # node lost at once. What counts is how long this operator has seen it NotReady.
    first = health(node("False"), at=SEEN)
    assert node_loss("n1", first, 8, [], SEEN + 29, 30) is None
    again = health(node("False"), previous=first, at=SEEN + 20)  # a later update: the sighting stays
    assert again.not_ready_seen == SEEN
    assert node_loss("n1", again, 8, [], SEEN + 31, 30) is not None
    back = health(node("True"), previous=again, at=SEEN + 32)
    assert back.not_ready_seen is None and node_loss("n1", back, 8, [], SEEN + 100, 30) is None


def test_an_allocatable_drop_waits_its_grace_and_a_kubelet_restart_that_recovers_is_no_loss():
    dropped = health(node(gpus="0"), previous=health(node(), at=SEEN - 100), at=SEEN)
    assert node_loss("n1", dropped, 8, [], SEEN + 5, 30) is None
    recovered = health(node(gpus="8"), previous=dropped, at=SEEN + 6)
    assert node_loss("n1", recovered, 8, [], SEEN + 60, 30) is None
    still = health(node(gpus="7"), previous=dropped, at=SEEN + 6)  # a new value: its own grace
    assert node_loss("n1", still, 8, [], SEEN + 30, 30) is None
    assert node_loss("n1", still, 8, [], SEEN + 37, 30) is not None


def test_a_node_that_reports_no_device_plugin_gpus_at_all_is_not_lost_for_it():
    """A DRA-only node publishes its GPUs in ResourceSlices, not as nvidia.com/gpu allocatable: the
    allocatable check does not apply to it (a reported 0 still does: a device plugin that died)."""
    dra_only = node()
    del dra_only["status"]["allocatable"]
    assert node_loss("n1", health(dra_only), 8, [], SEEN + 3600, 30) is None
    assert node_loss("n1", health(node(gpus="0")), 8, [], SEEN + 31, 30) is not None
