"""The living-cluster run's pure half: a seeded stream of jobs that arrive over time (Poisson), run
for a drawn lifetime and leave, and the figures read from when each pod was bound and finished.
hack/bench/peers/compare_living.py submits the stream to each peer on its own fresh rig and records the times.

Demand: arrivals at rate load x cluster GPUs / (mean GPUs per job x mean lifetime), so the GPUs the
jobs ask for in steady state are `load` times the cluster's (1.1: a queue that never quite drains,
as on a busy cluster). The size mix is the burst's (workload.STREAM_MIX); lifetimes are lognormal
(sigma 0.8, a few long jobs among many short ones) around the mean, the same for every size.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.core.workload import STREAM_MIX
from bench.peers.translators import PeerJob

LIFETIME_SIGMA = 0.8
LIMIT_SIGMA = 0.5  # declared limits over lifetimes (with_limits)
MIN_LIFETIME_SECONDS = 10
# Size classes by replicas: what a queue's users feel differently (a 1-GPU notebook-sized job and a
# 128-node pretraining gang do not wait alike).
SIZE_CLASSES = (("1 replica", 1, 1), ("2-16 replicas", 2, 16), ("32+ replicas", 17, 1 << 30))


def mean_job_gpus() -> float:
    total = sum(w for _, _, w in STREAM_MIX)
    return sum(r * g * w for r, g, w in STREAM_MIX) / total


def arrival_rate(cluster_gpus: int, load: float, mean_lifetime: float) -> float:
    """Jobs per second for `load` x the cluster's GPUs in steady demand (Little's law)."""
    return load * cluster_gpus / (mean_job_gpus() * mean_lifetime)


def living_stream(seconds: float, seed: int, cluster_gpus: int, load: float = 1.1,
                  mean_lifetime: float = 300.0) -> list[PeerJob]:
    """The jobs arriving in the first `seconds` of the run, in arrival order. Gangs of up to 16
    replicas require one TOR, larger ones prefer TORs (as in the burst, peers.stream)."""
    rng = random.Random(seed)
    rate = arrival_rate(cluster_gpus, load, mean_lifetime)
    shapes = [(r, g) for r, g, _ in STREAM_MIX]
    weights = [w for _, _, w in STREAM_MIX]
    jobs: list[PeerJob] = []
    at = rng.expovariate(rate)
    while at < seconds:
        replicas, gpus = rng.choices(shapes, weights)[0]
        # A lognormal of mean 1 (mu = -sigma^2 / 2), scaled to the mean lifetime.
        lifetime = mean_lifetime * rng.lognormvariate(-LIFETIME_SIGMA ** 2 / 2, LIFETIME_SIGMA)
        required = "tor" if 1 < replicas <= 16 else None
        jobs.append(PeerJob(f"l{len(jobs):04d}-{replicas}x{gpus}", replicas, gpus, required,
                            None if required else "tor", arrival=round(at, 2),
                            lifetime=max(MIN_LIFETIME_SECONDS, round(lifetime))))
        at += rng.expovariate(rate)
    return jobs


def with_limits(jobs: Sequence[PeerJob], share: float, seed: int) -> list[PeerJob]:
    """The same stream with `share` of the jobs declaring a time limit, as users of batch systems write them:
    rounded up to whole minutes, over their lifetime by a factor drawn lognormal around 2x (median; few close to
    it, some 5x), never under it (no job is ended by its limit, so the arrivals' work is the same)."""
    rng = random.Random(seed * 7919 + 1)
    out = []
    for job in jobs:
        if job.lifetime is None or rng.random() >= share:
            out.append(job)
            continue
        factor = max(1.1, rng.lognormvariate(math.log(2.0), LIMIT_SIGMA))
        limit = int(math.ceil(job.lifetime * factor / 60.0) * 60)
        out.append(dataclasses.replace(job, time_limit=limit))
    return out


def size_class(job: PeerJob) -> str:
    return next(name for name, low, high in SIZE_CLASSES if low <= job.replicas <= high)


def busy_gpus(intervals: Iterable[tuple[float, float | None, int]], end: float,
              step: float) -> list[tuple[float, int]]:
    """GPUs held at t = 0, step, 2 step, ... < end, from (bound at, finished at or None, GPUs) per pod."""
    changes: list[tuple[float, int]] = []
    for start, stop, gpus in intervals:
        changes.append((start, gpus))
        if stop is not None:
            changes.append((stop, -gpus))
    changes.sort()
    out: list[tuple[float, int]] = []
    held, i = 0, 0
    for k in range(math.ceil(end / step)):
        t = k * step
        while i < len(changes) and changes[i][0] <= t:
            held += changes[i][1]
            i += 1
        out.append((t, held))
    return out


def mean_busy(intervals: Iterable[tuple[float, float | None, int]], start: float, end: float,
              cluster_gpus: int) -> float:
    """GPUs held on average over [start, end), as a share of the cluster's: the exact time average of the
    (bound, finished or None, GPUs) intervals. Sampling the curve every 10 s instead was off by ~1 % on
    runs whose pods start and end in step with each other (the seed-12 runs)."""
    if end <= start:
        return 0.0
    held = sum(gpus * max(0.0, min(end, end if stop is None else stop) - max(start, begin))
               for begin, stop, gpus in intervals)
    return round(held / (end - start) / cluster_gpus, 4)


def _percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))], 2)


def settled_percentile(waits: Sequence[float], waiting: Sequence[float], p: float) -> float | None:
    """The p-th percentile (as `_percentile` ranks) of every job's wait, once it is decided, else None.
    `waits` are the placed jobs'; `waiting` the others' waits so far, which only grow, so they can only
    rank higher: the percentile is decided when the placed wait at its rank is at or below all of them."""
    n = len(waits) + len(waiting)
    if not n:
        return None
    rank = min(n - 1, round(p / 100 * (n - 1)))
    placed = sorted(waits)
    if len(placed) <= rank or (waiting and min(waiting) < placed[rank]):
        return None
    return round(placed[rank], 2)


def replicas_bound(bound: Mapping[str, float], job_of: Mapping[str, str]) -> dict[str, list[float]]:
    """Per job, when each of its pods was first seen bound."""
    out: dict[str, list[float]] = {}
    for pod, at in bound.items():
        if (owner := job_of.get(pod)) is not None:
            out.setdefault(owner, []).append(at)
    return out


def cohort_waits(jobs: Iterable[PeerJob], submitted: Mapping[str, float], times_of: Mapping[str, list[float]],
                 now: float) -> tuple[list[float], list[float]]:
    """The waits of the jobs placed by `now` (submit -> last replica bound; `times_of` from
    `replicas_bound`), and the waits so far of the submitted jobs still waiting."""
    waits: list[float] = []
    waiting: list[float] = []
    for job in jobs:
        if job.name not in submitted:
            continue
        times = [t for t in times_of.get(job.name, []) if t <= now]
        if len(times) >= job.replicas:
            waits.append(max(times) - submitted[job.name])
        else:
            waiting.append(now - submitted[job.name])
    return waits, waiting


def _spread(values: list[float]) -> dict[str, float | None]:
    return {"p50": _percentile(values, 50), "p99": _percentile(values, 99),
            "mean": round(statistics.fmean(values), 3) if values else None}


def _holding(by_name: Mapping[str, PeerJob], gpus_of: Mapping[str, int], bound: Mapping[str, float],
             running: Mapping[str, float], finished: Mapping[str, float], job_of: Mapping[str, str],
             cluster_gpus: int, end: float, warmup: float) -> dict[str, Any]:
    """Where a pod's GPUs go besides its lifetime: bound -> first seen Running, and Running -> finished past
    the lifetime asked; utilisation counted from Running instead of bound, and counted as work: a gang
    works from when its last replica runs (its ranks wait for each other) until each pod's lifetime ends."""
    to_running = [running[p] - at for p, at in bound.items() if p in running and p in gpus_of]
    lifetime = {name: j.lifetime for name, j in by_name.items() if j.lifetime is not None}
    past = [finished[p] - running[p] - lifetime[job_of[p]] for p in running
            if p in finished and job_of.get(p) in lifetime]
    intervals = [(at, finished.get(p), gpus_of[p]) for p, at in running.items() if p in gpus_of]
    work = _working(by_name, gpus_of, running, finished, job_of, lifetime)
    # Also from the run's start: when demand stays below the cluster, a scheduler that delays the work queued at
    # the warm-up's end moves it into the window and scores higher by being slower (seed 12,
    # docs/records/benchmarks-2026-11-to-2026-12-05.md).
    return {"pod_bound_to_running_seconds": _spread(to_running),
            "pod_running_past_lifetime_seconds": _spread(past),
            "gpu_utilisation_running_mean": mean_busy(intervals, warmup, end, cluster_gpus),
            "gpu_utilisation_work_mean": mean_busy(work, warmup, end, cluster_gpus),
            "gpu_utilisation_work_whole_run_mean": mean_busy(work, 0.0, end, cluster_gpus)}


def _working(by_name: Mapping[str, PeerJob], gpus_of: Mapping[str, int], running: Mapping[str, float],
             finished: Mapping[str, float], job_of: Mapping[str, str],
             lifetime: Mapping[str, float]) -> list[tuple[float, float | None, int]]:
    """Per pod of a gang whose every replica ran, (gang running, end of its work, GPUs): work ends at its
    lifetime after it started running, or when it finished if that came first; without a lifetime, at finish."""
    all_running = {job: max(times) for job, times in replicas_bound(running, job_of).items()
                   if job in by_name and len(times) >= by_name[job].replicas}
    out: list[tuple[float, float | None, int]] = []
    for pod, started in running.items():
        job = job_of.get(pod)
        if job not in all_running or pod not in gpus_of:
            continue
        stop = finished.get(pod)
        if job in lifetime:
            stop = min(started + lifetime[job], stop if stop is not None else math.inf)
        if stop is None or stop > all_running[job]:
            out.append((all_running[job], stop, gpus_of[pod]))
    return out


def living_figures(jobs: list[PeerJob], submitted: Mapping[str, float], bound: Mapping[str, float],
                   finished: Mapping[str, float], job_of: Mapping[str, str], cluster_gpus: int, end: float,
                   step: float = 10.0, warmup: float = 0.0, observed_until: float | None = None,
                   running: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One peer's living-cluster figures for the jobs that arrived before `end`. Times are seconds from
    the run's start: `submitted` per job, `bound` and `finished` per pod (first seen bound / succeeded,
    failed or deleted), `job_of` a pod's job. Utilisation and pods/s are over [0, end]. The stream may go
    on past `end` until `observed_until` so that the waits of jobs still queued at `end` are seen: a
    job's wait is submit -> its last replica bound by `observed_until`; jobs still waiting then are
    unplaced, and count in the censored p99 with their wait so far. `job_times`: per job, [replicas,
    submitted, last replica bound or None], to look into a tail job by job."""
    until = end if observed_until is None else observed_until
    by_name = {j.name: j for j in jobs}
    gpus_of = {pod: by_name[job].gpus for pod, job in job_of.items() if job in by_name}
    held = [(at, finished.get(pod), gpus_of[pod]) for pod, at in bound.items() if pod in gpus_of]
    timeline = busy_gpus(held, end, step)
    steady = [gpus for t, gpus in timeline if t >= warmup]
    times_of = replicas_bound(bound, job_of)
    classes: dict[str, Any] = {}
    every_wait: list[float] = []
    every_waiting: list[float] = []
    for name, _, _ in SIZE_CLASSES:
        members = [j for j in jobs if size_class(j) == name and j.name in submitted]
        waits, waiting = cohort_waits(members, submitted, times_of, until)
        classes[name] = {"jobs": len(members), "placed": len(waits), "unplaced_at_end": len(waiting),
                         "wait_p50_seconds": _percentile(waits, 50), "wait_p99_seconds": _percentile(waits, 99),
                         "wait_p99_censored_seconds": _percentile(waits + waiting, 99),
                         "waits_seconds": sorted(round(w, 2) for w in waits)}
        every_wait += waits
        every_waiting += waiting
    job_times = {j.name: [j.replicas, round(submitted[j.name], 2),
                          round(max(ts), 2) if len(ts := [t for t in times_of.get(j.name, []) if t <= until])
                          >= j.replicas else None]
                 for j in jobs if j.name in submitted}
    partial = sum(1 for j in jobs if 0 < len(times_of.get(j.name, [])) < j.replicas)
    by_end, _ = cohort_waits(jobs, submitted, times_of, end)
    accepted = sum(1 for j in jobs if j.name in submitted)
    pods_bound = sum(1 for pod, at in bound.items() if at <= end)
    holding = ({} if running is None
               else _holding(by_name, gpus_of, bound, running, finished, job_of, cluster_gpus, end, warmup))
    return {
        **holding,
        "jobs_submitted": accepted, "pods_bound": pods_bound, "pods_finished": len(finished),
        "gpu_utilisation_mean": mean_busy(held, warmup, end, cluster_gpus),
        # From the run's start too: every peer meets the same arrivals on an empty cluster, so from t = 0 a
        # scheduler gains nothing by delay, while a window that opens later credits work delayed into it.
        "gpu_utilisation_whole_run_mean": mean_busy(held, 0.0, end, cluster_gpus),
        "gpu_utilisation_p10": round(sorted(steady)[len(steady) // 10] / cluster_gpus, 4) if steady else 0.0,
        "gpus_held_over_time": timeline, "waits_by_size": classes, "job_times": job_times,
        # A p99 over the placed alone favours a scheduler that leaves gangs waiting: `settled` is the p99 of
        # every job's wait once the jobs still waiting cannot change it (None: not decided, the censored p99
        # is then a lower bound); `placed_by_arrivals_end` is the figure earlier runs stopped at.
        "all_jobs": {"placed": len(every_wait), "unplaced_at_end": len(every_waiting),
                     "observed_seconds_after_arrivals": round(until - end, 1),
                     "wait_p50_seconds": _percentile(every_wait, 50), "wait_p99_seconds": _percentile(every_wait, 99),
                     "wait_p99_censored_seconds": _percentile(every_wait + every_waiting, 99),
                     "wait_p99_settled_seconds": settled_percentile(every_wait, every_waiting, 99),
                     "wait_p99_placed_by_arrivals_end_seconds": _percentile(by_end, 99),
                     "unplaced_when_arrivals_stopped": accepted - len(by_end)},
        "gangs_partly_bound_at_end": partial,
        "pods_bound_per_second": round(pods_bound / end, 2) if end > 0 else 0.0,
    }
