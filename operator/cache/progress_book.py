"""What the ranks of each job reported (railyard.worker): an in-memory book the report endpoint
fills and the actors read.

A checkpoint counts as committed only when every rank of the current attempt reported the same
step as saved. Each report repeats the rank's most recent saved steps, so an operator that restarts
rebuilds the book from the next round of reports; what is committed is also written to the job's
status (`lastCheckpoint`), which never moves backwards.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from railyard.operator.base.objects import Key
from railyard.operator.decide.reports import WorkerReport

SAMPLES_KEPT = 256  # per rank: the straggler window reads from these (stragglerPolicy.window.steps <= 256)
SAVES_KEPT = 16


class Samples:
    """A rank's most recent SAMPLES_KEPT [step, compute seconds, step seconds], in a ring of three packed
    arrays allocated on the first sample (12 bytes a sample, 3 KB a rank: a 16,384-rank job's samples
    take ~50 MB, where lists of tuples took ~600)."""

    __slots__ = ("compute", "count", "head", "steps", "walls")

    def __init__(self) -> None:
        self.steps: array[int] | None = None
        self.compute: array[float] = array("f")
        self.walls: array[float] = array("f")
        self.head = 0  # index of the oldest sample
        self.count = 0

    def __len__(self) -> int:
        return self.count

    @property
    def last_step(self) -> int:
        if self.steps is None or not self.count:
            return -1
        return self.steps[(self.head + self.count - 1) % SAMPLES_KEPT]

    def extend(self, samples: list[tuple[int, float, float]]) -> None:
        if self.steps is None:
            self.steps = array("i", bytes(4 * SAMPLES_KEPT))
            self.compute = array("f", bytes(4 * SAMPLES_KEPT))
            self.walls = array("f", bytes(4 * SAMPLES_KEPT))
        for step, compute, wall in samples:
            if self.count < SAMPLES_KEPT:
                i = (self.head + self.count) % SAMPLES_KEPT
                self.count += 1
            else:  # full: overwrite the oldest
                i = self.head
                self.head = (self.head + 1) % SAMPLES_KEPT
            self.steps[i], self.compute[i], self.walls[i] = step, compute, wall

    def recent(self) -> list[tuple[int, float, float]]:
        if self.steps is None:
            return []
        order = [(self.head + j) % SAMPLES_KEPT for j in range(self.count)]
        return [(self.steps[i], self.compute[i], self.walls[i]) for i in order]


@dataclass(slots=True)
class RankProgress:
    step: int | None = None
    seen: float = 0.0
    saved: dict[int, str] = field(default_factory=dict)  # step -> path, the rank's recent saves
    fault_saved: tuple[int, str] | None = None  # (step, path) it saved when asked on a fault
    fault_shards: frozenset[int] | None = None  # the local ranks whose shards that save holds (None: not said)
    samples: Samples = field(default_factory=Samples)  # kept only for jobs with a stragglerPolicy


@dataclass
class JobProgress:
    restart_count: int  # the attempt these reports are from
    started: float = 0.0  # when the first report of this attempt arrived
    first_step: int | None = None  # the lowest step this attempt reported (warm-up counts from it)
    ranks: dict[int, RankProgress] = field(default_factory=dict)
    # What the ranks are asked to do, carried on every report answer (e.g. {"checkpoint": {"step": N}}).
    directives: dict[str, Any] = field(default_factory=dict)

    def samples(self) -> dict[int, list[tuple[int, float, float]]]:
        return {r: p.samples.recent() for r, p in self.ranks.items()}

    @property
    def max_step(self) -> int:
        return max((p.step or 0 for p in self.ranks.values()), default=0)


class ProgressBook:
    """The report endpoint records from its own thread; every read and write holds `lock` (the actors
    take it around reads of `jobs`)."""

    def __init__(self) -> None:
        self.jobs: dict[Key, JobProgress] = {}
        self.lock = threading.RLock()

    def record(self, report: WorkerReport, now: float, samples: bool = True) -> None:
        """Caller has checked that the report comes from the rank's pod of the job's current attempt.
        `samples`: keep the step samples (only a job with a stragglerPolicy scores them)."""
        with self.lock:
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
                rank.saved[c.step] = sys.intern(c.path)  # every rank names the same path: held once
            if report.fault_save is not None:
                rank.fault_saved = (report.fault_save.step, sys.intern(report.fault_save.path))
                local = report.fault_save.local_ranks
                rank.fault_shards = frozenset(local) if local is not None else None
            while len(rank.saved) > SAVES_KEPT:
                del rank.saved[min(rank.saved)]
            # The attempt's lowest step (its warm-up, the goodput ledger's first interval), kept samples or not.
            steps = [s[0] for s in report.samples] or ([report.step] if report.step is not None else [])
            if steps:
                job.first_step = min(steps) if job.first_step is None else min(job.first_step, *steps)
            if not samples or not report.samples:
                return
            known = rank.samples.last_step
            rank.samples.extend([s for s in report.samples if s[0] > known])

    def committed(self, key: Key, restart_count: int, world: int) -> tuple[int, str] | None:
        """The newest step every one of `world` ranks of attempt `restart_count` saved, with its path."""
        with self.lock:
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
        with self.lock:
            job = self.jobs.get(key)
            return dict(job.directives) if job is not None else {}

    def ask_checkpoint(self, key: Key, step: int) -> None:
        """Every rank is asked (on its next report answer) to save `step` and then hold (not step on)
        while the request stands: the gang restarts from that step, so any step after it would be lost."""
        with self.lock:
            job = self.jobs.get(key)
            if job is not None:
                job.directives["checkpoint"] = {"step": step, "hold": True}

    def end_checkpoint_request(self, key: Key) -> None:
        with self.lock:
            job = self.jobs.get(key)
            if job is not None:
                job.directives.pop("checkpoint", None)

    def ask_fault_save(self, key: Key, restart_count: int, savers: Mapping[int, tuple[int, ...]]) -> None:
        """The survivors named in `savers` are asked (on their next report answer) to save the last step they
        completed: each rank the local ranks whose shards it saves."""
        with self.lock:
            job = self.jobs.get(key)
            if job is not None and job.restart_count == restart_count:
                job.directives["faultSave"] = {"restartCount": restart_count,
                                               "savers": {str(r): list(local) for r, local in savers.items()}}

    def fault_saved(self, key: Key, restart_count: int,
                    savers: Mapping[int, tuple[int, ...]]) -> dict[int, tuple[int, str]]:
        """What each of `savers` (of attempt `restart_count`) saved when asked on a fault: only a save that holds
        every shard it is asked for now (a saver asked for more after another saver was lost saves again)."""
        with self.lock:
            job = self.jobs.get(key)
            if job is None or job.restart_count != restart_count:
                return {}
            return {r: p.fault_saved for r, p in job.ranks.items() if p.fault_saved is not None and r in savers
                    and (p.fault_shards is None or p.fault_shards >= set(savers[r]))}

    def end_fault_save(self, key: Key) -> None:
        with self.lock:
            job = self.jobs.get(key)
            if job is not None:
                job.directives.pop("faultSave", None)

    def forget(self, alive: set[Key]) -> None:
        with self.lock:
            for key in [k for k in self.jobs if k not in alive]:
                del self.jobs[key]
