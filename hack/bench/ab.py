#!/usr/bin/env python3
"""A/B of the placement benchmark between two checkouts in the same run: A B A B ... (the machine is shared
and noisy, so the two sides take turns), then per timing figure the median of each side and B/A.
Prints JSON. Each checkout runs its own benchmark with its own venv (`make deps` there first).

    python -m bench ab --a /path/to/old/checkout --b . [--runs 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def timings(figures: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """Every p50_ms / p99_ms / mean_ms leaf, keyed by its path."""
    if isinstance(figures, dict):
        for key, value in figures.items():
            where = f"{path}.{key}" if path else key
            if key in ("p50_ms", "p99_ms", "mean_ms") and isinstance(value, int | float):
                yield where, float(value)
            else:
                yield from timings(value, where)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", required=True, help="the baseline's checkout")
    parser.add_argument("--b", required=True, help="the candidate's checkout")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sides: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    for _ in range(args.runs):
        for side in ("a", "b"):
            checkout = Path(getattr(args, side)).resolve()
            command = [str(checkout / ".venv" / "bin" / "python"), "-m", "bench", "placement",
                       *(["--quick"] if args.quick else [])]
            env = {**os.environ, "PYTHONPATH": str(checkout / "hack")}
            out = subprocess.run(command, check=True, capture_output=True, text=True, env=env, cwd=checkout).stdout
            sides[side].append(dict(timings(json.loads(out))))
    figures = {}
    for name in sorted(set(sides["a"][0]) & set(sides["b"][0])):
        a = statistics.median(run[name] for run in sides["a"])
        b = statistics.median(run[name] for run in sides["b"])
        figures[name] = {"a": round(a, 3), "b": round(b, 3), "b_over_a": round(b / a, 3) if a else None}
    ratios = [f["b_over_a"] for f in figures.values() if f["b_over_a"]]
    print(json.dumps({"runs": args.runs, "quick": args.quick, "figures": figures,
                      "median_ratio": round(statistics.median(ratios), 3) if ratios else None,
                      "ratio_range": [min(ratios), max(ratios)] if ratios else None}, indent=2))


if __name__ == "__main__":
    main()
