"""Rank-mapping figures: the communication cost of the graph mapping against the depth-first /
pipeline-chain order it replaced, on the stream's own placements, and against brute force."""

from __future__ import annotations

import itertools
import random
import statistics
from typing import Any

from railyard.topology.api.job import Parallelism
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.solver.commgraph import replica_graph
from railyard.topology.solver.graph_mapping import map_ranks, mapping_cost
from railyard.topology.solver.placement import Placement
from railyard.topology.solver.rank_order import order_replicas

# Layouts a job of R x 8-GPU replicas is given in turn (tensor, pipeline): whole-node tensor
# groups, two-node tensor groups, and pipelines of 2..8 stages.
_LAYOUTS = ((8, 2), (8, 4), (16, 2), (8, 8), (16, 4))


def stream_mapping(base: Snapshot, placements: dict[int, Placement]) -> dict[str, Any]:
    """Every multi-node placement of the stream (8-GPU replicas, >= 4) under each layout that
    divides it: the weighted cost (bytes x hops, default model) of both orders."""
    ratios: list[float] = []
    improved = 0
    for placement in placements.values():
        replicas = len(placement.replicas)
        if replicas < 4 or len(placement.replicas[0].gpus) != 8:
            continue
        slots = [(base.node(r.node), r.gpus) for r in placement.replicas]
        for tensor, pipeline in _LAYOUTS:
            if (replicas * 8) % (tensor * pipeline) or replicas * 8 < tensor * pipeline * 2:
                continue
            parallelism = Parallelism(tensor=tensor, pipeline=pipeline)
            edges = replica_graph(replicas, 8, parallelism)
            before = mapping_cost(edges, order_replicas(slots, 8, parallelism))
            after = mapping_cost(edges, map_ranks(slots, 8, parallelism))
            if before:
                ratios.append(after / before)
                improved += after < before
    return {"cases": len(ratios), "improved": improved,
            "mean_cost_vs_chain_order": round(statistics.fmean(ratios), 3) if ratios else 1.0,
            "min_cost_vs_chain_order": round(min(ratios), 3) if ratios else 1.0}


def _node(spine: int, leaf: int, tor: int, index: int) -> GpuNode:
    return GpuNode(name=f"n-{spine}-{leaf}-{tor}-{index}", spine=f"s{spine}", leaf=f"l{spine}-{leaf}",
                   tor=f"t{spine}-{leaf}-{tor}", rails=tuple(range(8)), numa=(0,) * 8, nvlink=(0,) * 8)


def brute_force_gap(samples: int, seed: int) -> dict[str, Any]:
    """Small gangs (6-7 replicas on a random 2 x 2 x 2 fabric) against every permutation."""
    rng = random.Random(seed)
    mapped_ratios: list[float] = []
    chain_ratios: list[float] = []
    while len(mapped_ratios) < samples:
        replicas, gpus = rng.choice([6, 7]), rng.choice([2, 4, 8])
        layouts = [(t, p) for t in (1, 2, 4, 8, 16) for p in (1, 2, 3, 7)
                   if (replicas * gpus) % (t * p) == 0 and (p > 1 or t > gpus)]
        if not layouts:
            continue
        tensor, pipeline = rng.choice(layouts)
        parallelism = Parallelism(tensor=tensor, pipeline=pipeline)
        per_node = rng.choice([1, 2]) if gpus <= 4 else 1
        nodes = [_node(rng.randint(0, 1), rng.randint(0, 1), rng.randint(0, 1), i) for i in range(replicas)]
        slots = [(nodes[i // per_node], tuple(range((i % per_node) * gpus, (i % per_node + 1) * gpus)))
                 for i in range(replicas)]
        edges = replica_graph(replicas, gpus, parallelism)
        best = min(mapping_cost(edges, [slots[i] for i in p]) for p in itertools.permutations(range(replicas)))
        if not best:
            continue
        mapped_ratios.append(mapping_cost(edges, map_ranks(slots, gpus, parallelism)) / best)
        chain_ratios.append(mapping_cost(edges, order_replicas(slots, gpus, parallelism)) / best)
    return {"instances": len(mapped_ratios),
            "graph_mapping": {"optimal": sum(r <= 1 + 1e-9 for r in mapped_ratios),
                              "mean_vs_optimum": round(statistics.fmean(mapped_ratios), 3),
                              "max_vs_optimum": round(max(mapped_ratios), 3)},
            "chain_order": {"optimal": sum(r <= 1 + 1e-9 for r in chain_ratios),
                            "mean_vs_optimum": round(statistics.fmean(chain_ratios), 3),
                            "max_vs_optimum": round(max(chain_ratios), 3)}}
