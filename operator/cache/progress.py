"""What the ranks of each job reported (railyard.worker): an in-memory book the report endpoint
fills and the actors read.

A checkpoint counts as committed only when every rank of the current attempt reported the same
step as saved. Each report repeats the rank's most recent saved steps, so an operator that restarts
rebuilds the book from the next round of reports; what is committed is also written to the job's
status (`lastCheckpoint`), which never moves backwards.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from railyard.operator.base.objects import Key
from railyard.operator.decide.reports import WorkerReport

SAMPLES_KEPT = 256  # per rank: the straggler window reads from these


@dataclass
class RankProgress:
    step: int | None = None
    seen: float = 0.0
    saved: dict[int, str] = field(default_factory=dict)  # step -> path, the rank's recent saves
    samples: deque[tuple[int, float, float]] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))


@dataclass
class JobProgress:
    restart_count: int  # the attempt these reports are from
    started: float = 0.0  # when the first report of this attempt arrived
    first_step: int | None = None  # the lowest step this attempt reported (warm-up counts from it)
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
        """Caller has checked that the report comes from the rank's pod of the job's current attempt."""
        key = (report.namespace, report.job)
        job = self.jobs.get(key)
        if job is None or job.restart_count < report.restart_count:
            job = self.jobs[key] = JobProgress(report.restart_count, now)  # a new attempt starts afresh
        elif job.restart_count > report.restart_count:
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

    def committed(self, key: Key, restart_count: int, world: int) -> tuple[int, str] | None:
        """The newest step every one of `world` ranks of attempt `restart_count` saved, with its path."""
        job = self.jobs.get(key)
        if job is None or job.restart_count != restart_count or len(job.ranks) < world or world <= 0:
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

    def ask_checkpoint(self, key: Key, step: int) -> None:
        """Every rank is asked (on its next report answer) to save `step`."""
        job = self.jobs.get(key)
        if job is not None:
            job.directives["checkpoint"] = {"step": step}

    def end_checkpoint_request(self, key: Key) -> None:
        job = self.jobs.get(key)
        if job is not None:
            job.directives.pop("checkpoint", None)

    def forget(self, alive: set[Key]) -> None:
        for key in [k for k in self.jobs if k not in alive]:
            del self.jobs[key]
