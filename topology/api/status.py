"""pydantic models of the TrainingJob's status (written by the operator only), and the base model of
every model of the resource (topology/api/job.py holds the spec and the object)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    model_serializer,
    model_validator,
)


class ApiModel(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


_Model = ApiModel


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
    # An adopted gang's pod (its own controller's, named by it): its GPUs are believed only for this uid.
    pod_uid: str | None = Field(None, alias="podUid")


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
    # The PriorityClass value it was placed at, kept by its restarts: a tenant renaming the class later can
    # lower the gang's rank when others look for room, never raise it (decide/priority.ranked_priority).
    priority: int | None = None

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


class SaveOnFaultRecord(_Model):
    """What a fault's restart did about saving the survivors' last step (operator/decide/fault_save.py)."""

    outcome: str  # Saved, NoLayout, ShardLost, NoAnswer, NotReporting
    step: int | None = None  # the step the savers saved (Saved)
    savers: list[int] = []  # the ranks asked to save, one per shard
    message: str = ""


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
    save_on_fault: SaveOnFaultRecord | None = Field(None, alias="saveOnFault")


class StepTime(_Model):
    p50_seconds: float | None = Field(None, alias="p50Seconds")
    p90_seconds: float | None = Field(None, alias="p90Seconds")
    samples: int = 0
    updated_at: Timestamp | None = Field(None, alias="updatedAt")


class LostSeconds(_Model):
    """Wall time the job did not make progress past its best step, by cause (decide/goodput_ledger.py)."""

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
    # When the gang was last placed from the queue (restarts keep it; a requeue places it anew): the time
    # limit (spec.timeLimitSeconds) counts from here.
    placed_at: Timestamp | None = Field(None, alias="placedAt")
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
    # When the job was preempted (the last hour's): the operator's per-job hourly cap counts them
    # across restarts of the operator.
    preemptions: list[Timestamp] = Field(default_factory=list)
    # namespace/name of the gang this one is being preempted for (while it saves a step).
    preempted_by: str | None = Field(None, alias="preemptedBy", max_length=512)
    # Set with preemptedBy when the job is shrunk rather than evicted: the replicas it keeps.
    shrink_to: int | None = Field(None, alias="shrinkTo")
    shrink_ranks: list[int] | None = Field(None, alias="shrinkRanks")  # the ranks it drops, as planned
    # When the job was last moved for defragmentation (the per-job interval reads it).
    last_migration: Timestamp | None = Field(None, alias="lastMigration")
    # The nodes held for it while others made room were not free in time: it plans no new room before this
    # (kept in status, so a new leader does not let it evict a second set of gangs at once).
    room_retry_after: Timestamp | None = Field(None, alias="roomRetryAfter")

    def as_patch(self) -> dict[str, Any]:
        """The merge patch body this partial status stands for."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)
