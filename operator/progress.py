"""What the ranks of each job reported (railyard.worker): a pure, in-memory book the report
endpoint fills and the placer reads.

A checkpoint counts as committed only when every rank of the current generation reported the same
step as saved. Each report repeats the rank's most recent saved steps, so an operator that restarts
rebuilds the book from the next round of reports; what is committed is also written to the job's
status (`lastCheckpoint`), which never moves backwards.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from railyard.operator.keys import LABEL_RESTART
from railyard.operator.views import JobView, PodView

Key = tuple[str, str]
SAMPLES_KEPT = 256  # per rank: the straggler window reads from these


class _Report(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class SavedCheckpoint(_Report):
    step: int = Field(ge=0)
    path: str = Field("", max_length=4096)


class WorkerReport(_Report):
    """The body a rank POSTs (railyard.worker.Reporter.payload)."""

    namespace: str = Field(min_length=1, max_length=63)
    job: str = Field(min_length=1, max_length=253)
    rank: int = Field(ge=0)
    generation: int = Field(ge=0)
    step: int | None = Field(None, ge=0)
    # [step, compute seconds, step seconds]; -1 = not measured
    samples: list[tuple[int, float, float]] = Field(default_factory=list, max_length=64)
    checkpoints: list[SavedCheckpoint] = Field(default_factory=list, max_length=16)


@dataclass
class RankProgress:
    step: int | None = None
    seen: float = 0.0
    saved: dict[int, str] = field(default_factory=dict)  # step -> path, the rank's recent saves
    samples: deque[tuple[int, float, float]] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))


@dataclass
class JobProgress:
    generation: int
    started: float = 0.0  # when the first report of this generation arrived
    first_step: int | None = None  # the lowest step this generation reported (warm-up counts from it)
    ranks: dict[int, RankProgress] = field(default_factory=dict)
    # What the ranks are asked to do, carried on every report answer (e.g. {"checkpoint": {"step": N}}).
    directives: dict[str, Any] = field(default_factory=dict)

    def samples(self) -> dict[int, list[tuple[int, float, float]]]:
        return {r: list(p.samples) for r, p in self.ranks.items()}

    @property
    def max_step(self) -> int:
        return max((p.step or 0 for p in self.ranks.values()), default=0)


class ProgressBook:
    def __init__(self) -> None:
        self.jobs: dict[Key, JobProgress] = {}

    def record(self, report: WorkerReport, now: float) -> None:
        """Caller has checked that the report comes from the rank's pod of the job's current generation."""
        key = (report.namespace, report.job)
        job = self.jobs.get(key)
        if job is None or job.generation < report.generation:
            job = self.jobs[key] = JobProgress(report.generation, now)  # a new generation starts afresh
        elif job.generation > report.generation:
            return
        rank = job.ranks.setdefault(report.rank, RankProgress())
        rank.seen = now
        if report.step is not None:
            rank.step = max(rank.step or 0, report.step)
        for c in report.checkpoints:
            rank.saved[c.step] = c.path
        while len(rank.saved) > 16:
            del rank.saved[min(rank.saved)]
        for s in report.samples:
            job.first_step = s[0] if job.first_step is None else min(job.first_step, s[0])
        known = rank.samples[-1][0] if rank.samples else -1
        rank.samples.extend(s for s in report.samples if s[0] > known)

    def committed(self, key: Key, generation: int, world: int) -> tuple[int, str] | None:
        """The newest step every one of `world` ranks of `generation` saved, with its path."""
        job = self.jobs.get(key)
        if job is None or job.generation != generation or len(job.ranks) < world or world <= 0:
            return None
        common: set[int] | None = None
        for r in range(world):
            rank = job.ranks.get(r)
            if rank is None:
                return None
            common = set(rank.saved) if common is None else common & set(rank.saved)
        if not common:
            return None
        step = max(common)
        return step, job.ranks[0].saved[step]

    def directives(self, key: Key) -> dict[str, Any]:
        job = self.jobs.get(key)
        return dict(job.directives) if job is not None else {}

    def forget(self, alive: set[Key]) -> None:
        for key in [k for k in self.jobs if k not in alive]:
            del self.jobs[key]


@dataclass(frozen=True)
class Refusal:
    status: int  # the HTTP status the endpoint answers
    reason: str  # bounded: the metric label
    message: str


def check_report(report: WorkerReport, pod_namespace: str, pod_name: str, pod_uid: str,
                 pod: PodView | None, job: JobView | None) -> Refusal | None:
    """Does this report come from the pod that runs `report.rank` of the job's current generation?
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
    current = job.restart_count
    pod_generation = pod.labels.get(LABEL_RESTART, "0")
    if report.generation != current or pod_generation != str(current):
        return Refusal(409, "stale", f"generation {report.generation} (pod {pod_name} of generation "
                       f"{pod_generation}) is not the job's current generation {current}")
    return None
