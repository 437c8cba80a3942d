"""Typed views of the API objects the operator keeps in memory, each parsed once when it arrives.

- `PodView`: only what placement, accounting and job status need (20k pods must stay cheap: a slotted
  dataclass is a fraction of a nested dict). Built on the reflector's thread from the raw JSON.
- `Job`: a TrainingJob with its spec validated (or the reason it is invalid), its placement request
  and its status parsed into the pydantic models of `railyard.topology.api.job`. The raw body is kept for
  the pod template, which the builders copy as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from railyard.operator.base.keys import ANNOTATION_PLACEMENT_ID, LABEL_JOB, LABEL_RANK, SCHEDULING_GATE
from railyard.operator.base.reasons import ConditionStatus, ConditionType, JobState
from railyard.topology.api.job import (
    REMOVED_SPEC_FIELDS,
    Condition,
    FaultPolicy,
    PlacementStatus,
    StragglerPolicy,
    TrainingJob,
    TrainingJobSpec,
    TrainingJobStatus,
)
from railyard.topology.api.timestamps import parse_time
from railyard.topology.cluster.affinity import template_problem
from railyard.topology.cluster.nodes import PodUsage, pod_usages
from railyard.topology.cluster.pod_trust import pod_name
from railyard.topology.cluster.workload_groups import GroupMember, member_of
from railyard.topology.planner.documents import format_validation
from railyard.topology.solver.request import GangRequest

Key = tuple[str, str]


def resource_version(obj: Mapping[str, Any]) -> int | None:
    """resourceVersions are etcd revisions on every upstream API server: comparable as integers.
    None when a server hands out something else (then ordering checks are skipped)."""
    raw = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return None


# --- pods --------------------------------------------------------------------------------------------

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
    ip: str | None  # status.podIP: what the job's EndpointSlice gives its rank's DNS name
    gated: bool  # still carries Railyard's scheduling gate
    phase: str | None
    terminating: bool
    deleted_at: str | None
    terminated: str | None  # why a container failed, for the job's Failed message
    exit_code: int | None  # the first non-zero container exit code
    disruption: str | None  # DisruptionTarget=True: "<reason>: <message>" (evicted, preempted, taint manager)
    scheduled_at: str | None  # PodScheduled=True lastTransitionTime: when it was bound
    usage: PodUsage | None  # what it claims to hold (None: nothing); believed only for a placement's pod
    bound_usage: PodUsage | None  # what it holds if not believed: its requests once bound
    labels: Mapping[str, str]  # for inter-pod rules (anti-affinity, topology spread) of other jobs
    # The gang of a workload Railyard places without owning it (topology/cluster/workload_groups.py): kept for a
    # pod that opted in (Railyard's gate) or that Railyard placed (its job label); None for every other pod.
    member: GroupMember | None = None
    # Such a gated pod's own node affinity: what pinning it narrows (act/materialiser.py pins without reading it).
    node_affinity: Mapping[str, Any] | None = None
    active_deadline: int | None = None  # such a pod's spec.activeDeadlineSeconds (the kubelet ends it then)

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
        node_name=spec.get("nodeName"), ip=status.get("podIP") or None,
        gated=any(g.get("name") == SCHEDULING_GATE for g in spec.get("schedulingGates") or []),
        phase=status.get("phase"), terminating=bool(meta.get("deletionTimestamp")),
        deleted_at=meta.get("deletionTimestamp"), terminated=_termination(status), exit_code=_exit_code(status),
        disruption=_disruption(status), scheduled_at=_scheduled_at(status),
        usage=(usages := pod_usages(pod))[0], bound_usage=usages[1], labels=labels,
        member=(member := _member(pod, labels)),
        node_affinity=(spec.get("affinity") or {}).get("nodeAffinity") if member is not None else None,
        active_deadline=spec.get("activeDeadlineSeconds") if member is not None else None,
    )


def _member(pod: Mapping[str, Any], labels: Mapping[str, str]) -> GroupMember | None:
    """Its gang, when Railyard may place it: it carries Railyard's gate, or it was placed by Railyard (its job
    label) without being a TrainingJob's own pod (it has no rank label of Railyard's from creation)."""
    gated = any(g.get("name") == SCHEDULING_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])
    if not gated and LABEL_JOB not in labels:
        return None
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    if any(o.get("kind") == "TrainingJob" and o.get("controller") for o in owners):
        return None  # a TrainingJob's own pod
    return member_of(pod)


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


# --- TrainingJobs --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Job:
    """A TrainingJob as the operator reads it. `model` and `request` are None when the spec cannot be
    placed (`invalid` says why, naming the field); `status` is always a model (empty when the stored
    status cannot be read: `status_error` says why)."""

    body: Mapping[str, Any]
    status: TrainingJobStatus
    model: TrainingJob | None
    request: GangRequest | None
    invalid: str | None
    status_error: str | None = None
    # The job's state from its conditions, worked out once: asked many times per pass of every job.
    state: JobState = field(init=False)
    degraded: str | None = field(init=False)  # the reason of a True Degraded condition (the breaker asks)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", state_of(self.status.conditions))
        object.__setattr__(self, "degraded", next((c.reason for c in self.status.conditions if
                                                   c.type == ConditionType.DEGRADED and
                                                   c.status == ConditionStatus.TRUE), None))

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.body["metadata"]

    @property
    def namespace(self) -> str:
        return str(self.meta["namespace"])

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid") or "")

    @property
    def generation(self) -> int | None:
        """metadata.generation: the spec's version (what observedGeneration echoes)."""
        return self.meta.get("generation")

    @property
    def resource_version(self) -> str | None:
        return self.meta.get("resourceVersion")

    @property
    def created(self) -> datetime | None:
        return parse_time(self.meta.get("creationTimestamp"))

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def spec(self) -> TrainingJobSpec | None:
        return self.model.spec if self.model is not None else None

    @property
    def desired_replicas(self) -> int:
        """spec.replicas (a valid job always has it; 0 otherwise)."""
        raw = (self.body.get("spec") or {}).get("replicas")
        return raw if isinstance(raw, int) and not isinstance(raw, bool) else 0

    @property
    def priority_class_name(self) -> str | None:
        return self.spec.priority_class_name if self.spec is not None else None

    @property
    def fault_policy(self) -> FaultPolicy:
        return self.spec.fault_policy if self.spec is not None else FaultPolicy()

    @property
    def straggler_policy(self) -> StragglerPolicy | None:
        return self.spec.straggler_policy if self.spec is not None else None

    @property
    def restart_count(self) -> int:
        """The gang's restart count (status.restartCount): 0 for the first attempt."""
        return self.status.restart_count

    @property
    def placement(self) -> PlacementStatus | None:
        """The recorded placement, when it has ranks."""
        placement = self.status.placement
        return placement if placement is not None and placement.ranks else None

    @property
    def conditions(self) -> list[Condition]:
        return self.status.conditions

    def condition(self, type_: ConditionType) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == type_), None)

    def is_true(self, type_: ConditionType) -> bool:
        c = self.condition(type_)
        return c is not None and c.status == ConditionStatus.TRUE

    @property
    def finished(self) -> bool:
        return self.state in (JobState.SUCCEEDED, JobState.FAILED)

    @property
    def queued_since(self) -> datetime | None:
        return self.status.queued_since or self.created

    @property
    def deadline(self) -> datetime | None:
        """When the placed gang's time limit runs out (spec.timeLimitSeconds from status.placedAt)."""
        spec, placed_at = self.spec, self.status.placed_at
        if spec is None or spec.time_limit_seconds is None or placed_at is None or self.placement is None:
            return None
        return placed_at + timedelta(seconds=spec.time_limit_seconds)

    def past_deadline(self, now: float) -> bool:
        """Its time limit ran out (`now`: wall seconds)."""
        deadline = self.deadline
        return deadline is not None and now >= deadline.timestamp()


def state_of(conditions: list[Condition]) -> JobState:
    """The first True of Succeeded, Failed, Running, Placed; Queued otherwise."""
    true = {c.type for c in conditions if c.status == ConditionStatus.TRUE}
    for type_, state in ((ConditionType.SUCCEEDED, JobState.SUCCEEDED), (ConditionType.FAILED, JobState.FAILED),
                         (ConditionType.RUNNING, JobState.RUNNING), (ConditionType.PLACED, JobState.PLACED)):
        if type_ in true:
            return state
    return JobState.QUEUED


def _without_removed(body: dict[str, Any]) -> dict[str, Any]:
    """A job stored before a field was removed keeps it (the API server refuses it only on writes that
    change it): the operator ignores it rather than stop managing a running gang."""
    spec = body.get("spec")
    if isinstance(spec, dict) and any(f in spec for f in REMOVED_SPEC_FIELDS):
        body = {**body, "spec": {k: v for k, v in spec.items() if k not in REMOVED_SPEC_FIELDS}}
    return body


def parse_job(body: Mapping[str, Any]) -> Job:
    """Parse a TrainingJob once: its spec (or why it is invalid) and its status."""
    raw_status = body.get("status") or {}
    status_error = None
    try:
        status = TrainingJobStatus.model_validate(raw_status)
    except ValidationError as e:
        status, status_error = TrainingJobStatus(), f"status: {format_validation(e)}"
    placement = status.placement
    if placement is not None and any(r.pod is None for r in placement.ranks):  # a packed placement
        name = str((body.get("metadata") or {}).get("name") or "")
        ranks = [r if r.pod else r.model_copy(update={"pod": pod_name(name, r.rank, placement.serial)})
                 for r in placement.ranks]
        status = status.model_copy(update={"placement": placement.model_copy(update={"ranks": ranks})})
    model: TrainingJob | None = None
    request: GangRequest | None = None
    invalid: str | None = None
    try:
        model = TrainingJob.model_validate(_without_removed({k: v for k, v in body.items() if k != "status"}))
        request = GangRequest.from_job(model)
    except ValidationError as e:
        model, invalid = None, format_validation(e)
    except ValueError as e:
        model, invalid = None, f"spec.template: {e}"
    if request is not None:
        problem = template_problem(request.pod_spec, request.pod_labels)
        if problem:
            model, request, invalid = None, None, f"spec.template.spec.{problem}"
    return Job(body, status, model, request, invalid, status_error)
