"""When a node holding a job's ranks counts as lost: a pure reading of what the Node says and of when
the operator first saw it say so, so the fault path never waits for Kubernetes' 300 s eviction and
never takes routine operations for a fault.

Loss means loss. For a node that holds ranks of the job, the ranks are lost when:
- the Node is gone;
- it carries the out-of-service taint (`node.kubernetes.io/out-of-service`: an admin says it is shut
  down), at once;
- a node condition whose type is in `fault_conditions` is True (DEFAULT_FAULT_CONDITIONS: the GPU
  health conditions NVIDIA's NVSentinel health monitors set, plus the GPU conditions of the Node
  Problem Detector on AKS), at once;
- a NoExecute taint the job does not tolerate (the kubelet's and node controller's not-ready and
  unreachable taints are left to the Ready rule), at once;
- allocatable nvidia.com/gpu has been below what the job holds there for `grace_seconds` (the device
  plugin marks a GPU unhealthy on a critical XID; a kubelet restart briefly reports 0, hence the wait);
- Ready has been False or Unknown for `grace_seconds`.
Grace periods run from when the operator first observed the signal, on its monotonic clock (never by
comparing the node's timestamps with this machine's clock). NoSchedule taints — a cordon, kubelet
pressure, network-unavailable, Railyard's own quarantine — never count: they only keep new placements
off the node, as Kubernetes itself never evicts running pods for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from railyard.topology.api.quantity import parse_count
from railyard.topology.cluster.labels import (
    ANNOTATION_MAINTENANCE,
    ANNOTATION_QUARANTINED_AT,
    GPU_RESOURCE,
    LABEL_NVSENTINEL_STATE,
    NVSENTINEL_DRAINING,
    OUT_OF_SERVICE_TAINT,
    QUARANTINE_TAINT,
)
from railyard.topology.cluster.model import Taint

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
# Autoscalers drain a node by tainting it, not by cordoning it: Karpenter (`karpenter.sh/disrupted`, before
# v1 `karpenter.sh/disruption`) and Cluster Autoscaler (`ToBeDeletedByClusterAutoscaler`). Such a node is
# being drained as surely as a cordoned one.
DRAIN_TAINTS = ("karpenter.sh/disrupted", "karpenter.sh/disruption", "ToBeDeletedByClusterAutoscaler")


class LossReason(StrEnum):
    """Why a node's ranks count as lost."""

    NODE_DELETED = "NodeDeleted"
    OUT_OF_SERVICE = "OutOfService"  # the out-of-service taint: the node is shut down
    NODE_NOT_READY = "NodeNotReady"  # Ready False/Unknown past the grace
    TAINT = "Taint"  # a NoExecute taint the job does not tolerate
    GPU_FAULT = "GpuFault"  # a GPU health condition True
    GPU_ALLOCATABLE_DROPPED = "GpuAllocatableDropped"
    NODE_NOT_USABLE = "NodeNotUsable"  # not usable for new pods (cordoned, excluded) when the gang restarts
    DRAINED = "Drained"  # a rank's pod was evicted from a cordoned node (kubectl drain)
    MAINTENANCE = "Maintenance"  # planned: a drain held by the gang's budget, or announced (railyard.dev/maintenance)
    STRAGGLER = "Straggler"  # evicted for computing slower than its peers
    MIGRATION = "Migration"  # planned: moved so a waiting gang fits in one domain (defragmentation)


@dataclass(frozen=True)
class NodeLoss:
    node: str
    reason: LossReason
    message: str
    since: str | None  # when the signal started, if the object says
    observed_for: float = 0.0  # how long this operator has seen the signal


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """What the fault path reads of one Node, with the operator's own observation times
    (monotonic seconds; None while the signal is absent)."""

    name: str
    taints: tuple[Taint, ...]
    gpu_allocatable: int | None  # None: the node reports no nvidia.com/gpu (its GPUs are DRA's, in ResourceSlices)
    faults: tuple[tuple[str, str, str | None], ...]  # True fault conditions: (type, message, lastTransitionTime)
    ready: bool
    ready_status: str  # True | False | Unknown | Missing
    unschedulable: bool
    quarantined_until: str | None  # the railyard.dev/quarantined-until annotation
    quarantined_at: str | None = None  # the railyard.dev/quarantined-at annotation
    not_ready_seen: float | None = None  # first seen not Ready
    allocatable_seen: float = 0.0  # the current allocatable value first seen
    maintenance: str | None = None  # planned maintenance announced on the node (maintenance_of)

    @property
    def draining(self) -> bool:
        """Cordoned, or tainted for removal by an autoscaler (DRAIN_TAINTS): its pods are being evicted."""
        return self.unschedulable or any(t.key in DRAIN_TAINTS and t.effect != "PreferNoSchedule"
                                         for t in self.taints)

    @property
    def quarantined(self) -> bool:
        return any(t.key == QUARANTINE_TAINT for t in self.taints)

    @property
    def quarantine_reason(self) -> str | None:
        return next((t.value for t in self.taints if t.key == QUARANTINE_TAINT), None)

    @property
    def out_of_service(self) -> bool:
        return any(t.key == OUT_OF_SERVICE_TAINT for t in self.taints)

    def observed(self, previous: NodeHealth | None, now: float) -> NodeHealth:
        """This reading with its observation times carried over from the previous one."""
        not_ready = None if self.ready else (previous.not_ready_seen if previous is not None and
                                             previous.not_ready_seen is not None else now)
        allocatable = previous.allocatable_seen if previous is not None and \
            previous.gpu_allocatable == self.gpu_allocatable else now
        return _replace(self, not_ready, allocatable)


def _replace(health: NodeHealth, not_ready: float | None, allocatable: float) -> NodeHealth:
    return NodeHealth(health.name, health.taints, health.gpu_allocatable, health.faults, health.ready,
                      health.ready_status, health.unschedulable, health.quarantined_until, health.quarantined_at,
                      not_ready, allocatable, health.maintenance)


def read_health(node: Mapping[str, Any], quarantine_annotation: str,
                fault_conditions: Sequence[str] = DEFAULT_FAULT_CONDITIONS) -> NodeHealth:
    """A Node object's health, without observation times (see NodeHealth.observed)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    conditions = status.get("conditions") or []
    raw = (status.get("allocatable") or {}).get(GPU_RESOURCE)
    allocatable: int | None
    try:
        allocatable = parse_count(raw) if raw is not None else None
    except ValueError:
        allocatable = 0
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    faults = tuple((str(c["type"]), str(c.get("message") or ""), c.get("lastTransitionTime")) for c in conditions
                   if c.get("type") in fault_conditions and c.get("status") == "True")
    return NodeHealth(
        name=str(meta.get("name") or ""),
        taints=tuple(Taint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
                     for t in spec.get("taints") or []),
        gpu_allocatable=allocatable, faults=faults,
        ready=ready is not None and ready.get("status") == "True",
        ready_status=str(ready.get("status")) if ready is not None else "Missing",
        unschedulable=bool(spec.get("unschedulable")),
        quarantined_until=(meta.get("annotations") or {}).get(quarantine_annotation),
        quarantined_at=(meta.get("annotations") or {}).get(ANNOTATION_QUARANTINED_AT),
        maintenance=maintenance_of(node))


def maintenance_of(node: Mapping[str, Any]) -> str | None:
    """Why the node is announced for planned maintenance (the railyard.dev/maintenance annotation, or
    NVSentinel draining it), or None."""
    meta = node.get("metadata") or {}
    reason = ((meta.get("annotations") or {}).get(ANNOTATION_MAINTENANCE) or "").strip()
    if reason:
        return f"{ANNOTATION_MAINTENANCE}={reason[:200]}"
    state = (meta.get("labels") or {}).get(LABEL_NVSENTINEL_STATE)
    if state in NVSENTINEL_DRAINING:
        return f"{LABEL_NVSENTINEL_STATE}={state}"
    return None


def _tolerated(taint: Taint, tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = toleration.get("key") or ""
        if (toleration.get("operator") or "Equal") == "Exists":
            if not key or key == taint.key:
                return True
        elif key == taint.key and (toleration.get("value") or "") == taint.value:
            return True
    return False


def losses_of(held: Mapping[str, int], health: Mapping[str, NodeHealth], tolerations: Sequence[Mapping[str, Any]],
              now: float, grace_seconds: float) -> tuple[NodeLoss, ...]:
    """The lost ones among these nodes (node -> GPUs a gang holds there), in node order (`now` monotonic)."""
    losses = (node_loss(n, health.get(n), gpus, tolerations, now, grace_seconds) for n, gpus in sorted(held.items()))
    return tuple(loss for loss in losses if loss is not None)


def node_loss(name: str, health: NodeHealth | None, held_gpus: int, tolerations: Sequence[Mapping[str, Any]],
              now: float, grace_seconds: float) -> NodeLoss | None:
    """Why this node's ranks are lost now (`now`: the operator's monotonic clock), or None while the
    node is usable or a signal is still inside its grace."""
    if health is None:
        return NodeLoss(name, LossReason.NODE_DELETED, f"node {name} was deleted", None)
    if health.out_of_service:
        return NodeLoss(name, LossReason.OUT_OF_SERVICE, f"node {name}: taint {OUT_OF_SERVICE_TAINT} (shut down)",
                        None)
    for type_, message, since in health.faults:
        return NodeLoss(name, LossReason.GPU_FAULT, f"node {name}: condition {type_}: {message}".strip(), since)
    for taint in health.taints:
        if taint.effect == "NoExecute" and taint.key not in _LIFECYCLE_TAINTS and not _tolerated(taint, tolerations):
            return NodeLoss(name, LossReason.TAINT,
                            f"node {name}: taint {taint.key}={taint.value}:{taint.effect} not tolerated", None)
    dropped_for = now - health.allocatable_seen
    if health.gpu_allocatable is not None and health.gpu_allocatable < held_gpus and dropped_for >= grace_seconds:
        return NodeLoss(name, LossReason.GPU_ALLOCATABLE_DROPPED,
                        f"node {name}: allocatable {GPU_RESOURCE} {health.gpu_allocatable} < {held_gpus} held by "
                        f"the job for {dropped_for:.0f}s", None, dropped_for)
    if not health.ready and health.not_ready_seen is not None:
        waited = now - health.not_ready_seen
        if waited >= grace_seconds:
            return NodeLoss(name, LossReason.NODE_NOT_READY,
                            f"node {name}: Ready={health.ready_status} for {waited:.0f}s", None, waited)
    return None
