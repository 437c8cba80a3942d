"""Typed, slim views of the API objects the operator keeps in memory.

A PodView holds only what placement, accounting and job status need (20k pods must stay cheap:
a slotted dataclass is a fraction of a nested dict). Built on the reflector's thread from the raw
JSON the API server sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from railyard.operator.keys import ANNOTATION_PLACEMENT_ID, LABEL_JOB, LABEL_RANK, SCHEDULING_GATE
from railyard.topology.api import FaultPolicy, StragglerPolicy
from railyard.topology.nodes import PodUsage, pod_usage

Key = tuple[str, str]


def resource_version(obj: Mapping[str, Any]) -> int | None:
    """resourceVersions are etcd revisions on every upstream API server: comparable as integers.
    None when a server hands out something else (then ordering checks are skipped)."""
    raw = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    uid: str
    resource_version: int | None
    job: str | None
    rank: int | None
    placement_id: str | None
    owner_uid: str | None
    node_name: str | None  # bound node (spec.nodeName)
    gated: bool  # still carries Railyard's scheduling gate
    phase: str | None
    terminating: bool
    deleted_at: str | None
    terminated: str | None  # why a container failed, for the job's Failed message
    exit_code: int | None  # the first non-zero container exit code
    disruption: str | None  # DisruptionTarget=True: "<reason>: <message>" (evicted, preempted, taint manager)
    scheduled_at: str | None  # PodScheduled=True lastTransitionTime: when it was bound
    usage: PodUsage | None  # what it holds on its node (None: nothing)
    labels: Mapping[str, str]  # for inter-pod rules (anti-affinity, topology spread) of other jobs

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def job_key(self) -> Key | None:
        return (self.namespace, self.job) if self.job else None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def pod_view(pod: Mapping[str, Any]) -> PodView:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    rank_raw = labels.get(LABEL_RANK)
    owner = next((o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    return PodView(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""),
        resource_version=resource_version(pod), job=labels.get(LABEL_JOB),
        rank=int(rank_raw) if isinstance(rank_raw, str) and rank_raw.isdigit() else None,
        placement_id=annotations.get(ANNOTATION_PLACEMENT_ID), owner_uid=owner,
        node_name=spec.get("nodeName"),
        gated=any(g.get("name") == SCHEDULING_GATE for g in spec.get("schedulingGates") or []),
        phase=status.get("phase"), terminating=bool(meta.get("deletionTimestamp")),
        deleted_at=meta.get("deletionTimestamp"), terminated=_termination(status), exit_code=_exit_code(status),
        disruption=_disruption(status), scheduled_at=_scheduled_at(status),
        usage=pod_usage(pod), labels=labels,
    )


def _scheduled_at(status: Mapping[str, Any]) -> str | None:
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return c.get("lastTransitionTime")
    return None


def _disruption(status: Mapping[str, Any]) -> str | None:
    for c in status.get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return f"{c.get('reason') or 'DisruptionTarget'}: {c.get('message') or ''}".strip(": ")
    return None


def _exit_code(status: Mapping[str, Any]) -> int | None:
    for cs in status.get("containerStatuses") or []:
        code = ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
        if code:
            return int(code)
    return None


def _termination(status: Mapping[str, Any]) -> str | None:
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("exitCode", 0) != 0:
            return f"container {cs.get('name')} exited {term.get('exitCode')}: {term.get('reason') or ''} " \
                   f"{term.get('message') or ''}".strip()
    return status.get("reason") or status.get("message")


@dataclass(frozen=True, slots=True)
class JobView:
    """A TrainingJob as the operator reads it: typed accessors over the stored body (which the pure
    builders and status patches still take as is)."""

    body: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        return self.body["metadata"]

    @property
    def namespace(self) -> str:
        return self.meta["namespace"]

    @property
    def name(self) -> str:
        return self.meta["name"]

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def uid(self) -> str | None:
        return self.meta.get("uid")

    @property
    def generation(self) -> int | None:
        return self.meta.get("generation")

    @property
    def resource_version(self) -> str | None:
        return self.meta.get("resourceVersion")

    @property
    def created(self) -> str | None:
        return self.meta.get("creationTimestamp")

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def desired_replicas(self) -> int:
        """spec.replicas (a valid job always has it; 0 otherwise)."""
        return int((self.body.get("spec") or {}).get("replicas") or 0)

    @property
    def restart_count(self) -> int:
        """The gang's generation (status.restartCount)."""
        return int((self.body.get("status") or {}).get("restartCount") or 0)

    @property
    def priority(self) -> int:
        return int((self.body.get("spec") or {}).get("priority") or 0)

    @property
    def fault_policy(self) -> FaultPolicy:
        """Validated, with the CRD's defaults."""
        return FaultPolicy.model_validate((self.body.get("spec") or {}).get("faultPolicy") or {})

    @property
    def straggler_policy(self) -> StragglerPolicy | None:
        raw = (self.body.get("spec") or {}).get("stragglerPolicy")
        return StragglerPolicy.model_validate(raw) if raw is not None else None

    @property
    def status(self) -> dict[str, Any]:
        return self.body.get("status") or {}

    @property
    def conditions(self) -> list[dict[str, Any]]:
        return self.status.get("conditions") or []

    @property
    def placement(self) -> dict[str, Any]:
        return self.status.get("placement") or {}

    @property
    def queued_since(self) -> str | None:
        return self.status.get("queuedSince") or self.created

    def condition(self, type_: str) -> dict[str, Any]:
        return next((c for c in self.conditions if c.get("type") == type_), {})
