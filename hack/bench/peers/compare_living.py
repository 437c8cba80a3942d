"""`make compare`'s living cluster: the same peers on fresh superpod-2k rigs, fed a seeded Poisson
stream of jobs that run for a drawn lifetime (kwok ends each pod after the lifetime its
`railyard.dev/simulate-lifetime` annotation asks) and leave, for a fixed run. Figures per peer: GPU
utilisation over time, queue wait p50/p99 by size class, TORs per multi-replica job, partial gangs,
pods/s, scheduler CPU (per bound pod too), API requests per bound pod. The stream and the figures
are hack/bench/peers/living.py's.

A job's wait is only known once it is placed, so a run that stops with jobs queued has not measured their
waits, and a p99 over the placed favours the scheduler that leaves gangs starving. The stream therefore goes
on after the run (the same seeded arrivals, at the same load) until the p99 wait of the jobs that arrived
within the run is decided (living.settled_percentile) or COMPARE_LIVING_SETTLE_SECONDS pass; the jobs
arriving after the run only keep the cluster as busy and are not measured. Utilisation, pods/s, CPU and
API requests are the run's own.

Environment: COMPARE_LIVING_SECONDS (run length, default 1200), COMPARE_LIFETIME_SECONDS (mean pod
lifetime, default 300), COMPARE_LOAD (steady demand over the cluster's GPUs, default 1.1),
COMPARE_LIVING_SETTLE_SECONDS (the most the stream goes on after the run, default 300; 0: stop with
the run as earlier runs did), COMPARE_LIMIT_SHARE (the share of jobs declaring a time limit, drawn around
their lifetimes by living.with_limits; default 0: none declares), COMPARE_SEED, COMPARE_PEERS;
COMPARE_LIVING_OUT / COMPARE_LIVING_PLOT for the table and the plot.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.peers.compare import SEED, SELECTED, cluster_gpus, scheduler_cpu, start_peer, stop, submitter
from bench.peers.living import (
    SIZE_CLASSES,
    cohort_waits,
    living_figures,
    living_stream,
    replicas_bound,
    settled_percentile,
    with_limits,
)
from bench.peers.translators import JOB_LABEL, PeerJob, read_placements, summarise
from bench.rig.operator import NS, PodWatch, api_requests, cpu_seconds, per_pod

SECONDS = float(os.environ.get("COMPARE_LIVING_SECONDS", "1200"))
LIFETIME = float(os.environ.get("COMPARE_LIFETIME_SECONDS", "300"))
LOAD = float(os.environ.get("COMPARE_LOAD", "1.1"))
SETTLE = float(os.environ.get("COMPARE_LIVING_SETTLE_SECONDS", "300"))
LIMIT_SHARE = float(os.environ.get("COMPARE_LIMIT_SHARE", "0"))
CHECK_SECONDS = 5.0  # how often, after the run, the harness asks whether the p99 is decided
CLUSTER_GPUS = 2048 * 8  # superpod-2k


def _p99_settled(cohort, submitted: dict[str, float], watcher: PodWatch, t0: float) -> bool:
    now = time.monotonic() - t0
    bound = {p: at - t0 for p, at in dict(watcher.bound).items()}
    job_of = {pod: labels[JOB_LABEL] for pod, labels in dict(watcher.labels).items() if JOB_LABEL in labels}
    waits, waiting = cohort_waits(cohort, dict(submitted), replicas_bound(bound, job_of), now)
    return settled_percentile(waits, waiting, 99) is not None


def run_living(peer: str, jobs) -> dict:
    """One peer's run: `jobs` is the stream including what arrives after the run (see the docstring)."""
    cohort = [j for j in jobs if j.arrival < SECONDS]
    figures, api, processes, extra = start_peer(peer)
    gpus = cluster_gpus(api)
    watcher = PodWatch()
    requests_before, cpu_before = api_requests(api), cpu_seconds(extra)
    send = submitter(api, peer)
    submitted: dict[str, float] = {}
    failures: list[str] = []
    t0 = time.monotonic()

    def submit(job) -> None:
        at = time.monotonic() - t0
        try:
            send(job)
        except Exception as e:  # reported with the figures: a peer that refuses jobs is a finding
            failures.append(f"{job.name}: {e}")
            return
        submitted[job.name] = at  # only what was accepted waits (and counts as unplaced)

    def pace(until: float) -> None:
        # Pacing the arrivals (the stream's clock), not waiting for anything to happen.
        time.sleep(max(0.0, t0 + until - time.monotonic()))

    with ThreadPoolExecutor(8) as pool:
        for job in cohort:
            pace(job.arrival)
            pool.submit(submit, job)
        pace(SECONDS)
        end = time.monotonic() - t0
        cpu_after, requests_after, bound_by_end = cpu_seconds(extra), api_requests(api), len(watcher.bound)
        later = iter(j for j in jobs if j.arrival >= SECONDS)
        following = next(later, None)
        check = SECONDS
        while time.monotonic() - t0 < SECONDS + SETTLE:
            check = min(check + CHECK_SECONDS, SECONDS + SETTLE)
            while following is not None and following.arrival < check:
                pace(following.arrival)
                pool.submit(submit, following)
                following = next(later, None)
            pace(check)
            if _p99_settled(cohort, submitted, watcher, t0):
                break
    observed = time.monotonic() - t0
    watcher.stop()
    pods = api.list_all(f"/api/v1/namespaces/{NS}/pods")
    placements = read_placements([j for j in cohort if j.name in submitted], pods, api.list_all("/api/v1/nodes"))
    job_of = {pod: labels[JOB_LABEL] for pod, labels in watcher.labels.items() if JOB_LABEL in labels}
    figures.update(living_figures(
        cohort, submitted, {p: at - t0 for p, at in watcher.bound.items()},
        {p: at - t0 for p, at in watcher.finished.items()}, job_of, gpus, end, warmup=min(LIFETIME, end / 2),
        observed_until=observed, running={p: at - t0 for p, at in watcher.running.items()}))
    spans = summarise(placements)
    figures.update({k: spans[k] for k in ("mean_tors_spanned", "mean_leaves_spanned", "mean_ring_cost")})
    cpu = scheduler_cpu(cpu_before, cpu_after)
    bound = max(1, bound_by_end)
    figures.update({
        "scheduler_cpu_seconds": cpu, "scheduler_cpu_ms_per_bound_pod": round(cpu * 1000 / bound, 2),
        "cpu_seconds": {k: round(cpu_after[k] - cpu_before[k], 1) for k in cpu_after},
        "api_requests_per_bound_pod": per_pod(requests_before, requests_after, bound),
        "cluster_gpus": gpus, "submit_failures": len(failures), "submit_failure_examples": failures[:3],
        "run_seconds": round(end, 1), "observed_seconds": round(observed, 1),
    })
    stop(processes)
    return figures


def _share(key: str) -> Callable[[dict], str]:
    """A utilisation cell; '-' for a run recorded before the figure existed."""
    return lambda f: f"{f[key]:.1%}" if key in f else "-"


_COLUMNS = (("GPU utilisation held, from one lifetime", _share("gpu_utilisation_mean")),
            ("GPU utilisation held, from the start", _share("gpu_utilisation_whole_run_mean")),
            ("GPU utilisation as work, from the start", _share("gpu_utilisation_work_whole_run_mean")),
            *((f"{name} wait p50 / p99 s", lambda f, n=name: "{} / {}".format(
                f["waits_by_size"][n]["wait_p50_seconds"], f["waits_by_size"][n]["wait_p99_seconds"]))
              for name, _, _ in SIZE_CLASSES),
            ("all jobs wait p50 / p99 s", lambda f: "{} / {}".format(f["all_jobs"]["wait_p50_seconds"],
                                                                     f["all_jobs"]["wait_p99_seconds"])),
            ("all jobs p99 with the unplaced s", lambda f: f["all_jobs"]["wait_p99_censored_seconds"]),
            ("all jobs p99 settled s", lambda f: "not decided" if (settled := f["all_jobs"]["wait_p99_settled_seconds"])
             is None else settled),
            ("observed after the run s", lambda f: f["all_jobs"]["observed_seconds_after_arrivals"]),
            ("unplaced at end", lambda f: sum(c["unplaced_at_end"] for c in f["waits_by_size"].values())),
            ("TORs/job", lambda f: f["mean_tors_spanned"]), ("partial gangs", lambda f: f["gangs_partly_bound_at_end"]),
            ("pods/s", lambda f: f["pods_bound_per_second"]),
            ("scheduler CPU ms/pod", lambda f: f["scheduler_cpu_ms_per_bound_pod"]),
            ("API requests/pod", lambda f: f["api_requests_per_bound_pod"]["total"]))


def markdown(out: dict) -> str:
    lines = ["| peer | " + " | ".join(c for c, _ in _COLUMNS) + " |", "|---" * (len(_COLUMNS) + 1) + "|"]
    for peer, figures in out["peers"].items():
        lines.append(f"| {peer} | " + " | ".join(str(cell(figures)) for _, cell in _COLUMNS) + " |")
    return "\n".join(lines)


def plot(out: dict, target: Path) -> None:
    """GPUs held over time and the wait CDF of every job placed, per peer."""
    import matplotlib  # type: ignore[import-not-found]  # `make compare` installs it (.[compare])

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found]

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for peer, figures in out["peers"].items():
        times = figures["gpus_held_over_time"]
        axes[0].plot([t for t, _ in times], [g / figures["cluster_gpus"] for _, g in times], label=peer)
    axes[0].set(title=f"GPU utilisation (demand {LOAD}x the cluster, mean lifetime {LIFETIME:.0f} s)",
                xlabel="seconds into the run", ylabel="GPUs held / GPUs", ylim=(0, 1.05))
    axes[1].set(title="submit -> every replica bound, 32+ replica gangs", xlabel="seconds",
                ylabel="fraction of those placed")
    for peer, figures in out["peers"].items():
        waits = figures["waits_by_size"][SIZE_CLASSES[-1][0]]["waits_seconds"]
        if waits:
            axes[1].step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post", label=peer)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(target, dpi=90)


def the_stream(seed: int, limit_share: float) -> list[PeerJob]:
    """The run's arrivals and those after it, `limit_share` of them declaring time limits (the same jobs,
    arrivals and lifetimes whatever the share: only the declarations differ)."""
    jobs = living_stream(SECONDS + SETTLE, seed, CLUSTER_GPUS, LOAD, LIFETIME)
    return with_limits(jobs, limit_share, seed) if limit_share > 0 else jobs


def main() -> dict:
    jobs = the_stream(SEED, LIMIT_SHARE)
    cohort = [j for j in jobs if j.arrival < SECONDS]
    out: dict = {"mode": "living", "seconds": SECONDS, "seed": SEED, "load": LOAD, "mean_lifetime_seconds": LIFETIME,
                 "settle_seconds": SETTLE, "limit_share": LIMIT_SHARE,
                 "declaring_limits": sum(1 for j in cohort if j.time_limit is not None),
                 "jobs": len(cohort), "pods": sum(j.replicas for j in cohort),
                 "cluster": "superpod-2k (2,048 nodes x 8 GPUs)", "peers": {}}
    for peer in SELECTED:
        out["peers"][peer] = run_living(peer, jobs)
        brief = {k: v for k, v in out["peers"][peer].items() if k not in ("gpus_held_over_time", "job_times")}
        print(f"# living {peer}: {json.dumps(brief)}", flush=True)
    Path(os.environ.get("COMPARE_LIVING_OUT", "compare-living.md")).write_text(markdown(out) + "\n")
    if os.environ.get("COMPARE_LIVING_PLOT"):
        plot(out, Path(os.environ["COMPARE_LIVING_PLOT"]))
    return out
