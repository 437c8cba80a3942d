"""The placement benchmark (make bench): the solver's time on superpod-2k and a 12,288-node fabric, whole and
fragmented; a stream of gangs against best-fit and spread; the gap to an exact MILP; rank mapping against chain
order and brute force; rail-required acceptance. Prints JSON with a `checks` section."""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.core.exact import optimum, weighted
from bench.core.mapping_quality import brute_force_gap, stream_mapping
from bench.core.rails import rail_required_acceptance
from bench.core.reference import best_fit, spread
from bench.core.workload import fragment, job_stream, occupy, profile_snapshot, requests_for
from railyard.topology.api.job import Parallelism
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.nodes import build_snapshot
from railyard.topology.planner.profile import ClusterProfile, node_objects
from railyard.topology.solver.placement import Placement, solve
from railyard.topology.solver.request import GangRequest

Placer = Callable[[Snapshot, GangRequest], Placement | None]


def _percentiles(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, round(p / 100 * (len(ms) - 1)))], 3)

    return {"p50_ms": pct(50), "p99_ms": pct(99), "max_ms": round(ms[-1], 3), "samples": len(ms)}


def railyard_placer(snapshot: Snapshot, request: GangRequest) -> Placement | None:
    return solve(snapshot, request).placement


def gang_timings(base: Snapshot, sizes: tuple[int, ...], samples: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in sizes:
        request = GangRequest(name=f"gang-{size}", replicas=size, gpus_per_replica=8, resources=requests_for(8))
        out[f"gang_{size}x8"] = _timed_solves(base, occupy_half, request, samples, seed)
    return out


def occupy_half(snapshot: Snapshot, rng: random.Random) -> Snapshot:
    return occupy(snapshot, 0.5, rng)


def _timed_solves(base: Snapshot, busy: Callable[[Snapshot, random.Random], Snapshot], request: GangRequest,
                  samples: int, seed: int) -> dict[str, Any]:
    """Solve times of `request` on `samples` seeded variants of the cluster made busy by `busy`. The
    variants share the node memo, as the operator's snapshots of one node set do: the first solve on a
    new node set fills it (the template's checks of every node, the node table), the others reuse it.
    Each case's first solve is reported apart (`first_solve_ms`: the memo fill when the case is the
    first on its node set); the percentiles are over the `samples` solves after it, as in an operator
    whose nodes stay."""
    times, placed = [], 0
    first: float | None = None
    for i in range(samples + 1):
        snap = busy(base, random.Random(seed * 1000 + i))
        t0 = time.perf_counter()
        decision = solve(snap, request)
        elapsed = time.perf_counter() - t0
        if i == 0:
            first = elapsed
            continue
        times.append(elapsed)
        placed += decision.placed
    return {**_percentiles(times), "placed": placed,
            "first_solve_ms": round(first * 1000, 3) if first is not None else None}


LAYOUTS = {"data_parallel": None, "tp8_pp4_dp32": Parallelism(tensor=8, pipeline=4, data=32),
           "tp8_pp8_dp16": Parallelism(tensor=8, pipeline=8, data=16)}


def fragmented_timings(base: Snapshot, samples: int, seed: int) -> dict[str, Any]:
    """128 x 8 on the fragmented cluster (workload.fragment), per parallelism layout: the solve with
    its rank mapping, as `railyard plan` runs it."""
    out: dict[str, Any] = {}
    for name, parallelism in LAYOUTS.items():
        request = GangRequest(name="g", replicas=128, gpus_per_replica=8, parallelism=parallelism,
                              resources=requests_for(8))
        out[f"gang_128x8_{name}"] = _timed_solves(base, fragment, request, samples, seed)
    return out


def run_stream(base: Snapshot, placer: Placer, jobs, seed: int) -> dict[str, Any]:
    snap = occupy(base, 0.5, random.Random(seed))
    active: list[tuple[int, list[tuple[str, tuple[int, ...]]]]] = []
    results: dict[int, Placement] = {}
    times = []
    for job in jobs:
        # Jobs whose lifetime has passed leave and free their GPUs.
        ending = [a for a in active if a[0] <= job.index]
        if ending:
            active = [a for a in active if a[0] > job.index]
            used = {k: set(v) for k, v in snap.used.items()}
            for _, allocations in ending:
                for node, gpus in allocations:
                    used[node] -= set(gpus)
            snap = Snapshot(snap.nodes, {k: frozenset(v) for k, v in used.items()}, snap.excluded, levels=snap.levels)
        request = GangRequest(name=f"job-{job.index}", replicas=job.replicas, gpus_per_replica=job.gpus,
                              rail_alignment=RailAlignment.PREFERRED)
        t0 = time.perf_counter()
        placement = placer(snap, request)
        times.append(time.perf_counter() - t0)
        if placement is not None:
            results[job.index] = placement
            snap = snap.allocate(placement.allocations)
            active.append((job.index + job.lifetime, placement.allocations))
    return {"placements": results, "times": times}


def _stream_figures(jobs, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    common = set.intersection(*(set(r["placements"]) for r in runs.values()))
    multi = [j.index for j in jobs if j.index in common and j.replicas > 1]
    small = [j.index for j in jobs if j.index in common and j.replicas > 1 and j.gpus < 8]  # partial-node replicas
    figures: dict[str, Any] = {
        "jobs": len(jobs), "placed_by_all": len(common), "multi_replica_placed_by_all": len(multi),
        "small_gangs_placed_by_all": len(small),
    }
    for name, run in runs.items():
        placements: dict[int, Placement] = run["placements"]
        gpus = sum(j.replicas * j.gpus for j in jobs if j.index in placements)
        figures[name] = {
            "jobs_placed": len(placements),
            "gpus_placed": gpus,
            "mean_tors_spanned": round(statistics.fmean(placements[i].tors for i in multi), 3) if multi else 0,
            "mean_ring_cost": round(statistics.fmean(placements[i].ring_cost for i in multi), 3) if multi else 0,
            "rail_aligned_fraction": round(
                statistics.fmean(placements[i].rail_aligned for i in multi), 3) if multi else 0,
            "mean_nodes_per_small_gang": round(statistics.fmean(
                len({r.node for r in placements[i].replicas}) for i in small), 3) if small else 0,
            **_percentiles(run["times"]),
        }
    return figures


def tors_against_best_fit(base: Snapshot, jobs, seed: int) -> dict[str, Any]:
    """Railyard's stream, with best fit asked the same question on the same snapshot at every job:
    the per-job comparison (the two streams' snapshots drift apart once their choices differ)."""
    compared, more, fewer = 0, 0, 0

    def both(snapshot: Snapshot, request: GangRequest) -> Placement | None:
        nonlocal compared, more, fewer
        ours, theirs = railyard_placer(snapshot, request), best_fit(snapshot, request)
        if ours is not None and theirs is not None and request.replicas > 1:
            compared += 1
            more += ours.tors > theirs.tors
            fewer += ours.tors < theirs.tors
        return ours

    run_stream(base, both, jobs, seed)
    return {"jobs_compared": compared, "more_tors_than_best_fit": more, "fewer_tors_than_best_fit": fewer}


def optimality_gap(samples: int, seed: int) -> dict[str, Any]:
    base = profile_snapshot("small")
    gaps, optimal, solved = [], 0, 0
    rng = random.Random(seed)
    for i in range(samples):
        snap = occupy(base, rng.uniform(0.3, 0.7), random.Random(seed + i))
        size = rng.choice([8, 8, 4])
        replicas = rng.randint(2, 24)
        request = GangRequest(name="g", replicas=replicas, gpus_per_replica=size, rail_alignment=RailAlignment.NONE)
        decision = solve(snap, request)
        slots = [(n, len(snap.free(n)) // size) for n in snap.nodes]
        best = optimum(slots, replicas, empty=frozenset(n.name for n in snap.nodes if not snap.used.get(n.name)))
        if decision.placement is None or best is None:
            assert (decision.placement is None) == (best is None), "solver and MILP disagree on feasibility"
            continue
        p = decision.placement
        gap = weighted(p.tors, p.leaves, p.spines, len({r.node for r in p.replicas})) - best
        solved += 1
        optimal += gap == 0
        gaps.append(gap)
    return {"instances": solved, "optimal": optimal,
            "mean_weighted_gap": round(statistics.fmean(gaps), 3) if gaps else 0, "max_weighted_gap": max(gaps or [0]),
            "weights": "1e12*spines + 1e8*leaves + 1e4*TORs + nodes"}


def run_bench(quick: bool = False, seed: int = 7) -> dict[str, Any]:
    t0 = time.perf_counter()
    base = profile_snapshot("superpod-2k")
    samples = 10 if quick else 60
    stream_len = 100 if quick else 500
    gangs = gang_timings(base, (16, 128, 256), samples, seed)
    # Past the seed's 16k GPUs: 12,288 nodes (98k GPUs), 6 spines x 8 leaves x 8 TORs x 32 nodes.
    large = build_snapshot(node_objects(ClusterProfile.model_validate({"metadata": {"name": "12k"}, "spec": {
        "spines": 6, "leavesPerSpine": 8, "torsPerLeaf": 8, "nodesPerTor": 32, "node": {"gpus": 8}}}), kwok=False))
    gangs_12k = gang_timings(large, (128, 1024), 5 if quick else 20, seed)
    fragmented = fragmented_timings(base, 10 if quick else 40, seed)
    fragmented_12k = fragmented_timings(large, 5 if quick else 20, seed)
    jobs = job_stream(stream_len, random.Random(seed))
    runs = {name: run_stream(base, placer, jobs, seed)
            for name, placer in (("railyard", railyard_placer), ("best_fit", best_fit), ("spread", spread))}
    stream = _stream_figures(jobs, runs)
    ry, bf = stream["railyard"], stream["best_fit"]
    stream["ring_cost_vs_best_fit"] = round(ry["mean_ring_cost"] / max(bf["mean_ring_cost"], 1e-9), 3)
    stream["same_snapshot"] = tors_against_best_fit(base, jobs, seed)
    mapping = {"stream": stream_mapping(base, runs["railyard"]["placements"]),
               "brute_force": brute_force_gap(10 if quick else 40, seed)}
    rails = rail_required_acceptance(100 if quick else 1000, seed)
    checks = {
        "p99_128_gang_within_50ms": gangs["gang_128x8"]["p99_ms"] <= 50,
        "p99_128_gang_12k_nodes_within_50ms": gangs_12k["gang_128x8"]["p99_ms"] <= 50,
        "p99_1024_gang_12k_nodes_within_200ms": gangs_12k["gang_1024x8"]["p99_ms"] <= 200,
        # Issue 26's targets (reported; not yet met on every layout):
        "p99_128_gang_fragmented_within_15ms_every_layout": all(f["p99_ms"] <= 15 for f in fragmented.values()),
        "p99_128_gang_12k_nodes_within_20ms": gangs_12k["gang_128x8"]["p99_ms"] <= 20,
        "gpus_placed_ge_best_fit": ry["gpus_placed"] >= bf["gpus_placed"],
        "tors_le_best_fit": ry["mean_tors_spanned"] <= bf["mean_tors_spanned"],
        "tors_le_best_fit_on_every_job": stream["same_snapshot"]["more_tors_than_best_fit"] == 0,
        "ring_cost_le_0.95x_best_fit": stream["ring_cost_vs_best_fit"] <= 0.95,
        "mapping_never_costlier_than_chain_order": mapping["stream"]["mean_cost_vs_chain_order"] <= 1.0,
        "nodes_per_small_gang_le_best_fit": ry["mean_nodes_per_small_gang"] <= bf["mean_nodes_per_small_gang"],
        "rail_required_places_whenever_brute_force_can":
            rails["acceptance"] == 1 and not rails["placed_when_infeasible"],
    }
    return {
        "cluster": {"nodes": len(base.nodes), "gpus": base.total_gpus, "occupancy": 0.5},
        "python": platform.python_version(),
        "gangs": gangs,
        "gangs_12288_nodes": gangs_12k,
        "fragmented": fragmented,
        "fragmented_12288_nodes": fragmented_12k,
        "stream": stream,
        "exact": optimality_gap(20 if quick else 100, seed),
        "rank_mapping": mapping,
        "rail_required": rails,
        "checks": checks,
        "bench_seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer samples (the smoke test's size)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(run_bench(quick=args.quick, seed=args.seed), indent=2))
    return 0
