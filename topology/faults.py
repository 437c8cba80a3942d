"""When a node holding a job's ranks counts as lost: a pure reading of the Node object (or its
absence), so the fault path never waits for Kubernetes' 300 s not-ready/unreachable eviction.

Signals, for a node that holds ranks of the job:
- the Node is gone;
- Ready is False or Unknown for at least `grace_seconds` (its lastTransitionTime);
- a NoExecute or NoSchedule taint the job's pods do not tolerate (kubelet/controller not-ready and
  unreachable taints are left to the Ready rule, so the grace period holds);
- a node condition whose type is in `fault_conditions` with status True (DEFAULT_FAULT_CONDITIONS:
  the GPU health conditions NVIDIA's NVSentinel health monitors set, plus the GPU conditions of the
  Node Problem Detector on AKS);
- allocatable nvidia.com/gpu below what the job's pods hold there (the device plugin marks a GPU
  unhealthy on a critical XID).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from railyard.topology.eligibility import untolerated_taint
from railyard.topology.labels import GPU_RESOURCE
from railyard.topology.model import GpuNode, Taint
from railyard.topology.quantity import parse_count
from railyard.topology.timestamps import epoch

DEFAULT_FAULT_CONDITIONS: tuple[str, ...] = (
    # NVIDIA NVSentinel health monitors (fatal -> condition status True)
    "GpuMemWatch", "GpuThermalWatch", "GpuPcieWatch", "GpuPowerWatch", "GpuInforomWatch", "GpuSmWatch",
    "GpuNvlinkWatch", "GpuMcuWatch", "GpuPmuWatch", "GpuDriverWatch", "GpuCpusetWatch", "SysLogsXIDError",
    "SysLogsSXIDError", "SysLogsGPUFallenOff", "NVSwitchFatalError", "NVSwitchDown", "DCGMError",
    "CSPMaintenance",
    # Node Problem Detector GPU conditions (AKS)
    "GPUMissing", "GPUXIDErrors",
)
_LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


class LossReason(StrEnum):
    """Why a node's ranks count as lost."""

    NODE_DELETED = "NodeDeleted"
    NODE_NOT_READY = "NodeNotReady"  # Ready False/Unknown past the grace
    TAINT = "Taint"  # a NoExecute or NoSchedule taint the job does not tolerate
    GPU_FAULT = "GpuFault"  # a GPU health condition True
    GPU_ALLOCATABLE_DROPPED = "GpuAllocatableDropped"
    NODE_NOT_USABLE = "NodeNotUsable"  # became unusable while the restart was being decided
    STRAGGLER = "Straggler"  # evicted for computing slower than its peers


@dataclass(frozen=True)
class NodeLoss:
    node: str
    reason: LossReason
    message: str
    since: str | None  # when the signal started, if the object says


def node_loss(name: str, node: Mapping[str, Any] | None, held_gpus: int, tolerations: Sequence[Mapping[str, Any]],
              now: float, grace_seconds: float,
              fault_conditions: Sequence[str] = DEFAULT_FAULT_CONDITIONS) -> NodeLoss | None:
    """Why this node's ranks are lost now, or None while the node is usable (or still in its grace)."""
    if node is None:
        return NodeLoss(name, LossReason.NODE_DELETED, f"node {name} was deleted", None)
    status = node.get("status") or {}
    conditions = status.get("conditions") or []
    for c in conditions:
        if c.get("type") in fault_conditions and c.get("status") == "True":
            message = f"node {name}: condition {c['type']}: {c.get('message') or ''}".strip()
            return NodeLoss(name, LossReason.GPU_FAULT, message, c.get("lastTransitionTime"))
    raw = (status.get("allocatable") or {}).get(GPU_RESOURCE)
    try:
        allocatable = parse_count(raw) if raw is not None else 0
    except ValueError:
        allocatable = 0
    if allocatable < held_gpus:
        return NodeLoss(name, LossReason.GPU_ALLOCATABLE_DROPPED,
                        f"node {name}: allocatable {GPU_RESOURCE} {allocatable} < {held_gpus} held by the job", None)
    taints = tuple(Taint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
                   for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") not in _LIFECYCLE_TAINTS)
    probe = GpuNode(name, "", "", "", (), (), (), taints=taints)
    taint = untolerated_taint(probe, tolerations)
    if taint is not None:
        return NodeLoss(name, LossReason.TAINT,
                        f"node {name}: taint {taint.key}={taint.value}:{taint.effect} not tolerated", None)
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        since = (ready or {}).get("lastTransitionTime")
        waited = now - epoch(since, now - grace_seconds)
        if waited >= grace_seconds:
            state = "Unknown" if ready is None else ready.get("status")
            return NodeLoss(name, LossReason.NODE_NOT_READY, f"node {name}: Ready={state} for {waited:.0f}s", since)
    return None
