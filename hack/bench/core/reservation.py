"""Starvation-threshold benchmark (make reservation-bench): the living cluster's stream (bench/peers/living.py:
the seeds, size mix, lognormal lifetimes and 1.1x load of `make compare`'s living part) run through the
operator's own queue pass (decide/pass_plan.plan_pass, via bench/sim.py) in 1 s passes, for several
`starvationSeconds` on the same arrivals, with every other setting the operator's default. Prints JSON per
seed and threshold: every job's wait p50/p99 (ranked as the living harness ranks them, waits after the run's
end included), the p99 per size class, GPUs held averaged from the run's start, and the reservations taken.

Jobs run the pass they are placed and end exactly at their lifetime: there is no API server, kube-scheduler
or kwok, so waits run below a live rig's. It ranks thresholds; the live runs (`make compare`) measure them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bench.common import emit, superpod_snapshot
from bench.peers.living import SIZE_CLASSES, living_stream, settled_percentile, size_class
from bench.peers.translators import PeerJob
from bench.sim import SimCluster, training_job
from railyard.operator.base.settings import Settings

RUN_SECONDS = 600.0  # the living part's COMPARE_LIVING_SECONDS in docs/results/compare-living.json
LIFETIME_SECONDS = 150.0  # its COMPARE_LIFETIME_SECONDS
PASS_SECONDS = 1.0
SAID = "the operator's queue pass (decide/pass_plan.plan_pass) with its settings model, in 1 s simulated passes"


def simulate(jobs: list[PeerJob], starvation: float, seconds: float,
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """`extra`: more operator settings by their RAILYARD_* variable (`--set`)."""
    sim = SimCluster(superpod_snapshot(), Settings.of({**(extra or {}), "RAILYARD_STARVATION_SECONDS": starvation}))
    total = sim.snapshot.total_gpus
    pending = sorted(jobs, key=lambda j: j.arrival)
    classes = {}
    held_gpu_seconds = 0.0
    now = 0.0
    while now < seconds or (sim.waiting() and now < 3 * seconds):
        while pending and pending[0].arrival <= now:
            job = pending.pop(0)
            key = sim.submit(training_job(job.name, job.replicas, job.gpus, required_tier=job.required_tier,
                                          preferred_tier=job.preferred_tier, time_limit=job.time_limit),
                             job.lifetime or 0.0, job.arrival)
            classes[key] = size_class(job)
        sim.step(now)
        if now < seconds:
            held_gpu_seconds += (total - sim.current.free_gpus) * PASS_SECONDS
        now += PASS_SECONDS
    waiting = {job.key: now - sim.arrived[job.key] for job in sim.waiting()}

    def p(q: float, size: str | None = None) -> float | None:
        return settled_percentile([w for k, w in sim.waits.items() if size in (None, classes[k])],
                                  [w for k, w in waiting.items() if size in (None, classes[k])], q)

    return {"wait_p50_seconds": p(50), "wait_p99_seconds": p(99),
            "wait_p99_by_size_seconds": {name: p(99, name) for name, _, _ in SIZE_CLASSES},
            "gpu_utilisation_held_from_start": round(held_gpu_seconds / seconds / total, 4),
            "reservations": sim.reservations, "unplaced_at_cap": len(waiting), "backfilled": sim.backfilled}


def stream_parser(description: str, seeds: str) -> argparse.ArgumentParser:
    """The options every living-stream simulation takes: its seeds, seconds of arrivals and where to write."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", default=seeds, help="a range a-b or a list a,b,c")
    parser.add_argument("--seconds", type=float, default=RUN_SECONDS, help="seconds of arrivals")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="RAILYARD_X=VALUE",
                        help="another operator setting for every run (repeatable)")
    return parser


def extra_settings(pairs: list[str]) -> dict[str, Any]:
    """`--set` values as typed settings (the settings model parses them as it parses the environment)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        variable, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set {pair!r}: expected RAILYARD_X=VALUE")
        if variable == "RAILYARD_STARVATION_SECONDS":
            raise SystemExit("--set RAILYARD_STARVATION_SECONDS: the thresholds are --thresholds")
        out[variable] = value
    Settings.of(out)  # a bad name or value stops here, naming it
    return out


def seed_list(text: str) -> list[int]:
    if "-" in text:
        low, high = (int(x) for x in text.split("-"))
        return list(range(low, high + 1))
    return [int(x) for x in text.split(",")]


def main() -> int:
    parser = stream_parser(__doc__.splitlines()[0], "11-23")
    parser.add_argument("--thresholds", default="60,90,120", help="starvationSeconds to compare")
    args = parser.parse_args()
    seeds = seed_list(args.seeds)
    thresholds = [float(x) for x in args.thresholds.split(",")]
    base = max(thresholds)
    extra = extra_settings(args.set)
    print(f"reservation: {SAID}", file=sys.stderr)
    runs = []
    for seed in seeds:
        jobs = living_stream(args.seconds, seed, superpod_snapshot().total_gpus, 1.1, LIFETIME_SECONDS)
        by = {f"{t:g}": simulate(jobs, t, args.seconds, extra) for t in thresholds}
        ratios = {k: round((v["wait_p99_seconds"] or 0) / max(0.1, by[f"{base:g}"]["wait_p99_seconds"] or 0), 3)
                  for k, v in by.items()}
        runs.append({"seed": seed, "jobs": len(jobs), "by_starvation_seconds": by,
                     f"wait_p99_over_{base:g}s": ratios})
    emit({"workload": f"living stream on superpod-2k: {args.seconds:g} s of arrivals at 1.1x the GPUs, mean "
                      f"lifetime {LIFETIME_SECONDS:g} s", "simulation": SAID, "settings": extra,
          "runs": runs}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
