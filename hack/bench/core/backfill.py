"""Backfill benchmark (make backfill-bench): the living cluster's stream (bench/peers/living.py, as `make
reservation-bench` runs it through the operator's own queue pass, bench/sim.py) at the operator's default settings,
each seed run on the same arrivals with no job declaring a run time, then with each share of them declaring time
limits drawn around their lifetimes (living.with_limits). Prints JSON per seed: the p99 wait of every job and of
each size class, GPUs held, reservations, jobs backfilled, and the ratios with limits over without.

A simulation: it ranks the rule; the live runs (`make compare`) measure it against the peers."""

from __future__ import annotations

import statistics
import sys
from typing import Any

from bench.common import emit, superpod_snapshot
from bench.core.reservation import LIFETIME_SECONDS, SAID, seed_list, simulate, stream_parser
from bench.peers.living import SIZE_CLASSES, living_stream, with_limits
from railyard.operator.base.settings import Settings


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a / max(0.1, b), 3)


def _p99(run: dict[str, Any], name: str) -> float | None:
    return run["wait_p99_seconds"] if name == "all" else run["wait_p99_by_size_seconds"][name]


def main() -> int:
    parser = stream_parser(__doc__.splitlines()[0], "11-15")
    parser.add_argument("--shares", default="0.5,1.0", help="shares of jobs declaring a time limit")
    args = parser.parse_args()
    placement = Settings.of({}).placement
    shares = [float(x) for x in args.shares.split(",")]
    print(f"backfill: {SAID}; starvationSeconds {placement.starvation_seconds:g}, backfill trust "
          f"{placement.backfill_trust:g}, shares declaring limits {shares}", file=sys.stderr)
    names = ["all", *(name for name, _, _ in SIZE_CLASSES)]
    runs: list[dict[str, Any]] = []
    for seed in seed_list(args.seeds):
        jobs = living_stream(args.seconds, seed, superpod_snapshot().total_gpus, 1.1, LIFETIME_SECONDS)
        without = simulate(jobs, placement.starvation_seconds, args.seconds)
        run: dict[str, Any] = {"seed": seed, "jobs": len(jobs), "without_limits": without, "by_share": {}}
        for share in shares:
            limited = with_limits(jobs, share, seed)
            with_ = simulate(limited, placement.starvation_seconds, args.seconds)
            run["by_share"][f"{share:g}"] = {
                "declaring": sum(1 for j in limited if j.time_limit), "with_limits": with_,
                "p99_with_over_without": {n: _ratio(_p99(with_, n), _p99(without, n)) for n in names},
                "utilisation_with_over_without": _ratio(with_["gpu_utilisation_held_from_start"],
                                                        without["gpu_utilisation_held_from_start"])}
        runs.append(run)
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for share in shares:
        key = f"{share:g}"
        for name in [*names, "utilisation"]:
            ratios = [r["by_share"][key]["utilisation_with_over_without"] if name == "utilisation"
                      else r["by_share"][key]["p99_with_over_without"][name] for r in runs]
            known = [x for x in ratios if x is not None]
            if known:
                summary.setdefault(key, {})[name] = {"median": round(statistics.median(known), 3),
                                                     "min": min(known), "max": max(known)}
    emit({"workload": f"living stream on superpod-2k: {args.seconds:g} s of arrivals at 1.1x the GPUs, mean "
                      f"lifetime {LIFETIME_SECONDS:g} s; limits drawn by bench.peers.living.with_limits",
          "simulation": SAID, "backfill_trust": placement.backfill_trust,
          "with_over_without_by_share": summary, "runs": runs}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
