"""A worker's report (the body railyard.worker POSTs) and the check that it comes from the pod that
runs the reported rank of the job's current attempt. Pure: the endpoint (kube/report_server.py)
authenticates the token and hands both sides in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from railyard.operator.base.keys import LABEL_RESTART
from railyard.operator.base.objects import Job, PodView
from railyard.operator.decide.builders import attempt_env
from railyard.topology.cluster.pod_trust import is_carried


class _Report(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class SavedCheckpoint(_Report):
    step: int = Field(ge=0)
    path: str = Field("", max_length=4096)


class FaultSaved(SavedCheckpoint):
    # The local ranks whose shards it holds (None: an older worker, taken as every one it was asked for).
    local_ranks: list[int] | None = Field(None, alias="localRanks", max_length=1024)


class WorkerReport(_Report):
    """The body a rank POSTs (railyard.worker.Reporter.payload)."""

    namespace: str = Field(min_length=1, max_length=63)
    job: str = Field(min_length=1, max_length=253)
    rank: int = Field(ge=0)
    # The gang's restart count the rank runs under ("generation" from workers of before 0.2).
    restart_count: int = Field(ge=0, validation_alias=AliasChoices("restartCount", "generation", "restart_count"))
    step: int | None = Field(None, ge=0)
    # [step, compute seconds, step seconds]; -1 = not measured
    samples: list[tuple[int, float, float]] = Field(default_factory=list, max_length=64)
    checkpoints: list[SavedCheckpoint] = Field(default_factory=list, max_length=16)
    # The step this rank saved when asked to on a fault (its shards of it: decide/fault_save.py).
    fault_save: FaultSaved | None = Field(None, alias="faultSave")


@dataclass(frozen=True)
class Refusal:
    status: int  # the HTTP status the endpoint answers
    reason: str  # bounded: the metric label
    message: str
    # A stale report from a pod an in-place restart kept: the new attempt for its supervisor (worker/supervise.py).
    attempt: dict[str, Any] | None = None


def check_report(report: WorkerReport, pod_namespace: str, pod_name: str, pod_uid: str,
                 pod: PodView | None, job: Job | None) -> Refusal | None:
    """Does this report come from the pod that runs `report.rank` of the job's current attempt?
    `pod_*` is what the token says (TokenReview); `pod`/`job` what the operator's state holds."""
    if pod_namespace != report.namespace:
        return Refusal(403, "forbidden", f"token of namespace {pod_namespace!r} cannot report for namespace "
                       f"{report.namespace!r}")
    if pod is None or pod.uid != pod_uid:
        return Refusal(403, "forbidden", f"pod {pod_namespace}/{pod_name} (uid {pod_uid}) is not a pod Railyard "
                       "knows (deleted, or not yet seen)")
    if pod.job != report.job or pod.rank != report.rank:
        return Refusal(403, "forbidden", f"pod {pod_name} runs rank {pod.rank} of job {pod.job!r}, not rank "
                       f"{report.rank} of job {report.job!r}")
    if job is None:
        return Refusal(404, "unknown_job", f"TrainingJob {report.namespace}/{report.job} not found")
    if job.uid and pod.owner_uid != job.uid:  # a look-alike pod of the tenant's own making
        return Refusal(403, "forbidden", f"pod {pod_name} is not owned by TrainingJob {report.job} (uid {job.uid})")
    current = job.restart_count
    placement = job.placement
    # A pod an in-place restart kept is the current attempt's as soon as the placement names it, not only once
    # act/materialiser has relabelled it: its supervisor learns of the restart without waiting for that.
    kept = placement is not None and any(r.rank == report.rank and r.pod == pod_name and
                                         is_carried(job.name, placement, r) for r in placement.ranks)
    pod_restarts = str(current) if kept else pod.labels.get(LABEL_RESTART, "0")
    if report.restart_count != current or pod_restarts != str(current):
        message = (f"restart count {report.restart_count} (pod {pod_name} of restart count {pod_restarts}) is not "
                   f"the job's current restart count {current}")
        kept = pod_restarts == str(current) and report.restart_count < current and placement is not None and \
            any(r.rank == report.rank and r.pod == pod_name for r in placement.ranks)
        return Refusal(409, "stale", message, {"restartCount": current, "env": attempt_env(job)} if kept else None)
    return None
