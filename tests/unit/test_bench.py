"""The benchmark runs and Railyard is at least as good as best fit on every quality figure.

Timing figures are reported, never asserted here (speed is checked by reading the JSON)."""

from __future__ import annotations

import json

from bench.core.placement import run_bench


def test_quick_bench_quality_checks_hold():
    figures = run_bench(quick=True)
    json.dumps(figures)  # JSON-able
    checks = figures["checks"]
    assert checks["gpus_placed_ge_best_fit"], figures["stream"]
    assert checks["tors_le_best_fit"], figures["stream"]
    assert checks["ring_cost_le_0.95x_best_fit"], figures["stream"]
    assert checks["tors_le_best_fit_on_every_job"], figures["stream"]["same_snapshot"]
    assert checks["nodes_per_small_gang_le_best_fit"], figures["stream"]
    assert checks["rail_required_places_whenever_brute_force_can"], figures["rail_required"]
    assert figures["exact"]["instances"] > 0 and figures["exact"]["max_weighted_gap"] == 0
    for gang in figures["gangs"].values():
        assert {"p50_ms", "p99_ms", "samples"} <= set(gang)


