"""pydantic models of the TrainingJob resource (railyard.dev/v1alpha1).

One definition serves the planner, the operator and the CRD-vs-model agreement test. Unknown
fields are ignored (the API server prunes them anyway) so newer manifests still plan.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import (
    Field,
    field_validator,
    model_validator,
)
from railyard.topology.api.status import (  # noqa: F401 - the status models are part of this API
    PACK_ABOVE,
    PACKED_FIELD,
    ApiModel,
    AvoidNode,
    CheckpointRecord,
    Condition,
    DomainCount,
    GoodputStatus,
    LostSeconds,
    PlacementStatus,
    QuarantineRecord,
    RankPlacement,
    ReplacementRecord,
    RestartRecord,
    StepTime,
    StragglerRecord,
    Timestamp,
    TrainingJobStatus,
    UnhealthyNode,
    pack_ranks,
    rfc3339,
    unpack_ranks,
)
from railyard.topology.api.template import template_problem
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.labels import GPU_RESOURCE
from railyard.topology.cluster.levels import DEFAULT_LEVELS, NODE, check_name
from railyard.topology.cluster.nodes import pod_gpu_request
from railyard.topology.solver.commgraph import ModelHints

GROUP = "railyard.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainingJob"
PLURAL = "trainingjobs"


_Model = ApiModel


class TopologySpec(_Model):
    # Level names (levels.py): node, tor, leaf, spine by default, or the cluster's own levels;
    # checked against the cluster's topology where it is known (solver, operator).
    required_tier: str | None = Field(None, alias="requiredTier")
    preferred_tier: str | None = Field(None, alias="preferredTier")
    rail_alignment: RailAlignment = Field(RailAlignment.PREFERRED, alias="railAlignment")

    @field_validator("required_tier", "preferred_tier")
    @classmethod
    def _level_name(cls, value: str | None) -> str | None:
        return value if value is None or value == NODE else check_name(value)

    @model_validator(mode="after")
    def _preferred_within_required(self) -> TopologySpec:
        # The default levels' order is known without the cluster; custom levels are checked there.
        known = DEFAULT_LEVELS.names_bottom_up()
        if self.required_tier in known and self.preferred_tier in known and \
                DEFAULT_LEVELS.index(self.preferred_tier) > DEFAULT_LEVELS.index(self.required_tier):
            raise ValueError(
                f"preferredTier {self.preferred_tier!r} is above requiredTier "
                f"{self.required_tier!r}; a preference must be at or below the requirement"
            )
        return self


class Parallelism(_Model):
    tensor: int = Field(1, ge=1)
    pipeline: int = Field(1, ge=1)
    data: int | None = Field(None, ge=1)


class ModelSpec(_Model):
    """Sizes for the rank-mapping traffic model (commgraph.py); every field optional."""

    parameters: int | None = Field(None, ge=1)
    hidden_size: int | None = Field(None, alias="hiddenSize", ge=1)
    sequence_length: int | None = Field(None, alias="sequenceLength", ge=1)
    micro_batch_size: int | None = Field(None, alias="microBatchSize", ge=1)
    layers: int | None = Field(None, ge=1)
    micro_batches: int | None = Field(None, alias="microBatches", ge=1)

    def hints(self) -> ModelHints:
        given = {k: v for k, v in self.model_dump().items() if v is not None}
        return ModelHints(**given)


MAX_REPLICAS = 65536  # the CRD's maximum: ranks fit in 5 digits
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_WHOLE = re.compile(r"^[0-9]+$")


def _gpu_values(template: dict[str, Any]) -> list[tuple[str, Any]]:
    out = []
    for i, c in enumerate((template.get("spec") or {}).get("containers") or []):
        for part in ("limits", "requests"):
            value = ((c.get("resources") or {}).get(part) or {}).get(GPU_RESOURCE)
            if value is not None:
                out.append((f"spec.template.spec.containers[{i}].resources.{part}[{GPU_RESOURCE}]", value))
    return out


class RestartBackoff(_Model):
    initial_seconds: int = Field(10, alias="initialSeconds", ge=0)
    max_seconds: int = Field(300, alias="maxSeconds", ge=0)


class OnNoReplacement(StrEnum):
    """What happens when lost ranks find no replacement within replacementTimeoutSeconds."""

    REQUEUE = "Requeue"  # place the whole gang again, waiting if needed
    FAIL = "Fail"
    SHRINK = "Shrink"  # elastic jobs: continue on the survivors (at least minReplicas)


class RestartStrategy(StrEnum):
    """How a restart of the same size treats the healthy ranks' pods."""

    RECREATE = "Recreate"  # every pod of the gang deleted and created again
    IN_PLACE = "InPlace"  # only the lost ranks' pods; the others' processes restart in their pods (the supervisor)


class StragglerAction(StrEnum):
    REPORT = "Report"  # status, condition, Event
    EVICT = "Evict"  # also restart without the node (after a checkpoint) and quarantine it


class FaultPolicy(_Model):
    node_loss_grace_seconds: int = Field(30, alias="nodeLossGraceSeconds", ge=0, le=3600)
    max_restarts: int = Field(3, alias="maxRestarts", ge=0)
    restart_backoff: RestartBackoff = Field(default_factory=RestartBackoff, alias="restartBackoff")
    non_retryable_exit_codes: list[int] = Field(default_factory=list, alias="nonRetryableExitCodes")
    on_no_replacement: OnNoReplacement = Field(OnNoReplacement.REQUEUE, alias="onNoReplacement")
    replacement_timeout_seconds: int = Field(120, alias="replacementTimeoutSeconds", ge=0, le=86400)
    restart_strategy: RestartStrategy = Field(RestartStrategy.RECREATE, alias="restartStrategy")

    def backoff(self, restarts: int) -> float:
        """Delay before the next restart after a process failure: doubling, capped."""
        return float(min(self.restart_backoff.initial_seconds * 2 ** restarts, self.restart_backoff.max_seconds))


class StragglerWindow(_Model):
    steps: int = Field(50, ge=1, le=256)
    seconds: int = Field(120, ge=0)


class StragglerPolicy(_Model):
    """Slow nodes found from the ranks' reported compute times (railyard.worker)."""

    action: StragglerAction = StragglerAction.REPORT
    # A node is slow when the fastest comparable node's median compute time / its own is below this
    # (the NVIDIA resiliency extension's rule; 0.75 = a third slower).
    threshold: float = Field(0.75, gt=0, lt=1)
    window: StragglerWindow = Field(default_factory=StragglerWindow)
    min_duration_seconds: int = Field(300, alias="minDurationSeconds", ge=0)
    warmup_steps: int = Field(20, alias="warmupSteps", ge=0)
    checkpoint_before_evict: bool = Field(True, alias="checkpointBeforeEvict")
    checkpoint_timeout_seconds: int = Field(600, alias="checkpointTimeoutSeconds", ge=0)
    max_evictions_per_hour: int = Field(2, alias="maxEvictionsPerHour", ge=0)
    # An evicted node keeps the quarantine taint this long, then the operator lifts it (0: an admin does).
    quarantine_seconds: int = Field(3600, alias="quarantineSeconds", ge=0)


class ElasticPolicy(_Model):
    cooldown_seconds: int = Field(300, alias="cooldownSeconds", ge=0)
    min_growth: int = Field(1, alias="minGrowth", ge=1)
    checkpoint_before_resize: bool = Field(True, alias="checkpointBeforeResize")
    checkpoint_timeout_seconds: int = Field(300, alias="checkpointTimeoutSeconds", ge=0)


class PreemptionPolicy(StrEnum):
    """As PriorityClass.preemptionPolicy: may this job evict lower-priority gangs to fit?"""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


class PreemptionSpec(_Model):
    # Never: the job waits instead of evicting anyone. It can only make the job stricter than its
    # PriorityClass (a class's Never stays Never): being preempted is decided by priority, the admin's.
    policy: PreemptionPolicy | None = None
    # The job may run on the hot-spare nodes the operator keeps per TOR, and is evicted (checkpoint
    # first) as soon as a replacement needs one.
    backfill_spares: bool = Field(False, alias="backfillSpares")
    # The job may be moved (checkpoint first, then restarted elsewhere) so a waiting gang of equal or
    # higher priority fits in one domain, where the operator defragments (RAILYARD_DEFRAGMENTATION).
    migratable: bool = False


class AdoptSpec(_Model):
    """The gang of pods of a workload Railyard places without owning them (docs/workloads.md): written by the
    operator on the TrainingJob it keeps for that gang; Railyard pins and ungates those pods, never creates or
    deletes what their own controller owns (preempting them deletes their pods: the owner makes them again)."""

    kind: str = Field(max_length=63)  # JobSet, LeaderWorkerSet, Job, PyTorchJob, PodGroup
    name: str = Field(max_length=253)  # the workload's name (an LWS group: `<lws>-<group index>`)
    group: str = Field(max_length=512)  # the gang's key (topology/cluster/workload_groups.member_of)
    # A JobSet's Jobs' first ranks, by the Job's global index (its pods rank by offset + completion index); a
    # PyTorchJob's master and workers' first ranks (its pods rank by offset + replica index).
    offsets: list[int] | None = None


class CheckpointSpec(_Model):
    path: str | None = Field(None, max_length=4096)
    interval_seconds: int | None = Field(None, alias="intervalSeconds", ge=1)
    # The job's data-parallel replicas each hold their shard's whole training state at the end of a step
    # (replicated optimizer): on a fault without warning the survivors save the last step they completed and
    # the new attempt resumes from it (docs/faults.md#save-on-fault).
    save_on_fault: bool = Field(False, alias="saveOnFault")


# Fields a TrainingJob no longer has, and what to do instead (the CRD refuses them with the same words).
REMOVED_SPEC_FIELDS = {
    "priority": "a tenant-chosen number must not decide who is placed first; set spec.priorityClassName to one "
                "of the cluster's PriorityClasses (kubectl get priorityclasses)",
}


MAX_TIME_LIMIT_SECONDS = 366 * 24 * 3600  # 366 days: a longer one is no limit


class TrainingJobSpec(_Model):
    replicas: int = Field(ge=1, le=MAX_REPLICAS)
    min_replicas: int | None = Field(None, alias="minReplicas", ge=1, le=MAX_REPLICAS)
    max_replicas: int | None = Field(None, alias="maxReplicas", ge=1, le=MAX_REPLICAS)
    # The job's PriorityClass (scheduling.k8s.io): its value orders the queue and its pods carry it.
    # An admin's object, so a tenant can only pick among the classes the cluster offers.
    priority_class_name: str | None = Field(None, alias="priorityClassName", max_length=253)
    topology: TopologySpec = TopologySpec()
    parallelism: Parallelism | None = None
    model: ModelSpec | None = None
    fault_policy: FaultPolicy = Field(default_factory=FaultPolicy, alias="faultPolicy")
    checkpoint: CheckpointSpec | None = None
    straggler_policy: StragglerPolicy | None = Field(None, alias="stragglerPolicy")
    elastic_policy: ElasticPolicy = Field(default_factory=ElasticPolicy, alias="elasticPolicy")
    preemption: PreemptionSpec = Field(default_factory=PreemptionSpec)
    template: dict[str, Any] = Field(default_factory=dict)
    adopt: AdoptSpec | None = None
    # How long the gang may run once placed from the queue (Slurm's --time, a Job's activeDeadlineSeconds):
    # it is ended at the limit (Failed, TimeLimitExceeded), and placement trusts it (backfill into reservations).
    time_limit_seconds: int | None = Field(None, alias="timeLimitSeconds", ge=1, le=MAX_TIME_LIMIT_SECONDS)

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        for field, why in REMOVED_SPEC_FIELDS.items():
            if isinstance(data, dict) and field in data:
                raise ValueError(f"spec.{field} is removed: {why}")
        return data

    @model_validator(mode="after")
    def _check(self) -> TrainingJobSpec:
        low = self.min_replicas if self.min_replicas is not None else self.replicas
        high = self.max_replicas if self.max_replicas is not None else self.replicas
        if not low <= self.replicas <= high:
            raise ValueError(
                f"need minReplicas <= replicas <= maxReplicas, got minReplicas={low}, "
                f"replicas={self.replicas}, maxReplicas={high}"
            )
        problem = template_problem(self.template)
        if problem:
            raise ValueError(problem)
        for field_path, value in _gpu_values(self.template):
            if isinstance(value, bool) or not _WHOLE.match(str(value)):
                raise ValueError(f"{field_path}={value!r}: must be a whole, non-negative number of GPUs")
        if self.parallelism is not None and self.parallelism.data is None:
            p = self.parallelism
            if (self.replicas * self.gpus_per_replica) % (p.tensor * p.pipeline):
                raise ValueError(
                    f"spec.replicas: replicas * GPUs per replica = {self.replicas}*{self.gpus_per_replica} must be "
                    f"divisible by tensor*pipeline = {p.tensor}*{p.pipeline}"
                )
        if self.parallelism is not None and self.parallelism.data is not None:
            # Same rule as the CRD's CEL validation: checked when data is given.
            p = self.parallelism
            world = self.replicas * self.gpus_per_replica
            if p.tensor * p.pipeline * self.parallelism.data != world:
                raise ValueError(
                    f"parallelism tensor*pipeline*data = {p.tensor}*{p.pipeline}*{p.data} must equal "
                    f"replicas*GPUs per replica = {self.replicas}*{self.gpus_per_replica} = {world}"
                )
        return self

    @property
    def pod_spec(self) -> dict[str, Any]:
        return self.template.get("spec") or {}

    @property
    def gpus_per_replica(self) -> int:
        return pod_gpu_request(self.pod_spec)

    @property
    def effective_min_replicas(self) -> int:
        return self.min_replicas if self.min_replicas is not None else self.replicas


class ObjectMeta(_Model):
    name: str = Field(min_length=1)
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = Field(None, alias="creationTimestamp")
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class TrainingJob(_Model):
    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str = KIND
    metadata: ObjectMeta
    spec: TrainingJobSpec
    status: TrainingJobStatus | None = None

    @model_validator(mode="after")
    def _name(self) -> TrainingJob:
        name = self.metadata.name
        if not _DNS_1035.match(name):
            raise ValueError(f"metadata.name={name!r} must be a DNS-1035 label (lower-case letters, digits and '-', "
                             "starting with a letter): it names the job's Service and pod hostnames")
        top = max(self.spec.replicas, self.spec.max_replicas or 0)
        if len(f"{name}-{top - 1}") > 63:
            raise ValueError(f"metadata.name={name!r} is too long: the pod hostname {name}-{top - 1} "
                             "must fit in 63 characters")
        return self

    @model_validator(mode="after")
    def _kind(self) -> TrainingJob:
        if self.kind != KIND:
            raise ValueError(f"kind is {self.kind!r}, expected {KIND!r}")
        if self.api_version.split("/")[0] != GROUP:
            raise ValueError(f"apiVersion is {self.api_version!r}, expected {API_VERSION!r}")
        return self
