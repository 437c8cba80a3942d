"""pydantic models of the TrainingJob resource (railyard.dev/v1alpha1).

One definition serves the planner, the operator and the CRD-vs-model agreement test. Unknown
fields are ignored (the API server prunes them anyway) so newer manifests still plan.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_serializer,
    model_validator,
)
from railyard.topology.alignment import RailAlignment
from railyard.topology.commgraph import ModelHints
from railyard.topology.labels import GPU_RESOURCE
from railyard.topology.levels import DEFAULT_LEVELS, NODE, check_name
from railyard.topology.nodes import pod_gpu_request
from railyard.topology.template import template_problem

GROUP = "railyard.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainingJob"
PLURAL = "trainingjobs"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


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


class CheckpointSpec(_Model):
    path: str | None = Field(None, max_length=4096)
    interval_seconds: int | None = Field(None, alias="intervalSeconds", ge=1)


# Fields a TrainingJob no longer has, and what to do instead (the CRD refuses them with the same words).
REMOVED_SPEC_FIELDS = {
    "priority": "a tenant-chosen number must not decide who is placed first; set spec.priorityClassName to one "
                "of the cluster's PriorityClasses (kubectl get priorityclasses)",
}


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
    template: dict[str, Any] = Field(default_factory=dict)

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


# --- status (written by the operator only) --------------------------------------------------------------


def rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# An RFC 3339 timestamp, whole seconds in UTC, as the API server writes them.
Timestamp = Annotated[datetime, PlainSerializer(rfc3339, return_type=str)]


class Condition(_Model):
    type: str
    status: str = Field(pattern="^(True|False|Unknown)$")
    reason: str = ""
    message: str = ""
    last_transition_time: Timestamp | None = Field(None, alias="lastTransitionTime")
    observed_generation: int | None = Field(None, alias="observedGeneration")


class RankPlacement(_Model):
    rank: int
    node: str
    gpus: list[int]
    pod: str | None = None


class DomainCount(_Model):
    level: str
    count: int


PACKED_FIELD = "packedRanks"  # written instead of `ranks` for large placements (see PlacementStatus)
PACK_ABOVE = 1024  # placements of more ranks are written packed (a 16,384-rank list would pass 1 MiB)


def _gpu_ranges(gpus: list[int]) -> str:
    """[0, 1, 2, 3, 6] -> "0-3,6"."""
    out: list[str] = []
    for gpu in sorted(gpus):
        if out and "-" in out[-1] and int(out[-1].split("-")[1]) == gpu - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{gpu}"
        elif out and "-" not in out[-1] and int(out[-1]) == gpu - 1:
            out[-1] = f"{out[-1]}-{gpu}"
        else:
            out.append(str(gpu))
    return ",".join(out)


def _parse_ranges(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def pack_ranks(ranks: list[RankPlacement]) -> str:
    """`node:gpus` per rank in rank order, `;`-separated, GPUs as ranges ("gpu-0007:0-7;gpu-0012:0-7")."""
    return ";".join(f"{r.node}:{_gpu_ranges(r.gpus)}" for r in sorted(ranks, key=lambda r: r.rank))


def unpack_ranks(packed: str) -> list[RankPlacement]:
    out = []
    for rank, entry in enumerate(filter(None, packed.split(";"))):
        node, _, gpus = entry.rpartition(":")
        out.append(RankPlacement(rank=rank, node=node, gpus=_parse_ranges(gpus)))
    return out


class PlacementStatus(_Model):
    id: str = ""  # one placement; its pods carry it in railyard.dev/placement-id
    # Which placement of the job this is (0 for the first): its pods are named after it, so no pod
    # of one placement ever takes the name of a pod of another (a Terminating one included).
    serial: int = 0
    ranks: list[RankPlacement] = []
    tors: int = 0
    leaves: int = 0
    spines: int = 0
    domains: list[DomainCount] = []
    rail_aligned: bool = Field(False, alias="railAligned")
    desired_replicas: int | None = Field(None, alias="desiredReplicas")  # spec.replicas when it was decided
    released_at: Timestamp | None = Field(None, alias="releasedAt")  # when the whole gang was ungated

    @model_validator(mode="before")
    @classmethod
    def _unpack(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get(PACKED_FIELD) and not data.get("ranks"):
            return {**{k: v for k, v in data.items() if k != PACKED_FIELD}, "ranks": unpack_ranks(data[PACKED_FIELD])}
        return data

    @model_serializer(mode="wrap")
    def _pack(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if len(self.ranks) > PACK_ABOVE and "ranks" in out:
            del out["ranks"]
            out[PACKED_FIELD] = pack_ranks(self.ranks)
        return out


class UnhealthyNode(_Model):
    name: str
    reason: str
    message: str = ""
    since: Timestamp | None = None


class ReplacementRecord(_Model):
    rank: int
    lost: str
    new: str
    same_tor: bool = Field(False, alias="sameTor")


class QuarantineRecord(_Model):
    node: str
    reason: str
    until: Timestamp | None = None


class RestartRecord(_Model):
    reason: str | None = None
    lost_nodes: list[str] = Field(default_factory=list, alias="lostNodes")
    replacements: list[ReplacementRecord] = []
    moved_ranks: int = Field(0, alias="movedRanks")
    detected_at: Timestamp | None = Field(None, alias="detectedAt")
    decided_at: Timestamp | None = Field(None, alias="decidedAt")
    released_at: Timestamp | None = Field(None, alias="releasedAt")
    resume_step: int | None = Field(None, alias="resumeStep")
    resume_checkpoint: str | None = Field(None, alias="resumeCheckpoint")
    previous_replicas: int | None = Field(None, alias="previousReplicas")
    quarantine: list[QuarantineRecord] = []  # taints this restart decided (a successor applies them)


class StepTime(_Model):
    p50_seconds: float | None = Field(None, alias="p50Seconds")
    p90_seconds: float | None = Field(None, alias="p90Seconds")
    samples: int = 0
    updated_at: Timestamp | None = Field(None, alias="updatedAt")


class LostSeconds(_Model):
    """Wall time the job did not make progress past its best step, by cause (decide/goodput.py)."""

    detection: float = 0.0
    capacity: float = 0.0
    restart: float = 0.0
    recompute: float = 0.0
    stalled: float = 0.0


class GoodputStatus(_Model):
    """Effective training time: productiveSeconds over the wall time from `since` to `updatedAt`."""

    since: Timestamp
    updated_at: Timestamp = Field(alias="updatedAt")
    ratio: float | None = None
    productive_seconds: float = Field(0.0, alias="productiveSeconds")
    lost_seconds: LostSeconds = Field(default_factory=LostSeconds, alias="lostSeconds")
    best_step: int = Field(0, alias="bestStep")
    step: int | None = None  # the current attempt's step when last accounted
    attempt: int = 0  # the restartCount that step belongs to
    stalled_since: Timestamp | None = Field(None, alias="stalledSince")


class StragglerRecord(_Model):
    node: str
    ranks: list[int] = []
    score: float = 1.0
    since: Timestamp | None = None
    action: str = ""  # Reported | CheckpointRequested | Evicted


class CheckpointRecord(_Model):
    step: int = Field(ge=0)
    path: str = ""
    time: Timestamp | None = None
    # The restartCount of the ranks that saved it ("generation" in statuses written before 0.2).
    restart_count: int = Field(0, validation_alias=AliasChoices("restartCount", "generation", "restart_count"),
                               serialization_alias="restartCount")


class AvoidNode(_Model):
    node: str
    reason: str = ""
    until: Timestamp | None = None


class TrainingJobStatus(_Model):
    """The status the operator writes. A partial one is a merge patch: dumped with exclude_unset, the
    fields given (None included: null deletes) and nothing else."""

    observed_generation: int | None = Field(None, alias="observedGeneration")
    conditions: list[Condition] = []
    placement: PlacementStatus | None = None
    replicas: int = 0
    selector: str | None = None
    queued_since: Timestamp | None = Field(None, alias="queuedSince")
    start_time: Timestamp | None = Field(None, alias="startTime")
    completion_time: Timestamp | None = Field(None, alias="completionTime")
    restart_count: int = Field(0, alias="restartCount")  # the gang's attempts so far
    placements: int = 0  # placements recorded so far (the next one's serial)
    process_restarts: int = Field(0, alias="processRestarts")  # what faultPolicy.maxRestarts bounds
    unhealthy_nodes: list[UnhealthyNode] = Field(default_factory=list, alias="unhealthyNodes")
    last_restart: RestartRecord | None = Field(None, alias="lastRestart")
    last_checkpoint: CheckpointRecord | None = Field(None, alias="lastCheckpoint")
    step_time: StepTime | None = Field(None, alias="stepTime")
    goodput: GoodputStatus | None = None
    stragglers: list[StragglerRecord] | None = None
    # When the job was last evicted from a slow node (the last hour's, at most EVICTIONS_KEPT): the
    # hourly cap counts across restarts and operator restarts.
    straggler_evictions: list[Timestamp] = Field(default_factory=list, alias="stragglerEvictions")
    avoid_nodes: list[AvoidNode] = Field(default_factory=list, alias="avoidNodes")

    def as_patch(self) -> dict[str, Any]:
        """The merge patch body this partial status stands for."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


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
