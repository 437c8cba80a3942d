"""Rank mapping: which replica gets which rank, and which GPU serves which local rank.

Replica ranks follow a depth-first walk of the topology (spine, leaf, TOR, node), so ring
neighbours share the lowest tier possible; for the hierarchical distance used here a DFS order is
an optimal ring. With pipeline parallelism, each data-parallel chain of stages is packed into one
TOR where possible. Local ranks are matched to GPUs with `scipy.optimize.linear_sum_assignment`
so local rank j sits on the same rail on every replica (data-parallel peers rail-aligned).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from railyard.topology.api.job import Parallelism
from railyard.topology.cluster.model import GpuNode
from scipy.optimize import linear_sum_assignment

Slot = tuple[GpuNode, tuple[int, ...]]


def dfs_key(slot: Slot) -> tuple[tuple[str, ...], str, str, str, str, tuple[int, ...]]:
    node, gpus = slot
    return (node.upper, node.spine, node.leaf, node.tor, node.name, gpus)


def _pipeline_chains(ordered: list[Slot], stages: int) -> list[list[Slot]]:
    """Groups of `stages` slots, TOR-local first, then from the DFS-ordered leftovers."""
    by_tor: dict[tuple[tuple[str, ...], str, str, str], list[Slot]] = {}
    for slot in ordered:
        by_tor.setdefault((slot[0].upper, slot[0].spine, slot[0].leaf, slot[0].tor), []).append(slot)
    chains: list[list[Slot]] = []
    leftovers: list[Slot] = []
    for members in by_tor.values():
        whole = len(members) - len(members) % stages
        chains.extend(members[i : i + stages] for i in range(0, whole, stages))
        leftovers.extend(members[whole:])
    chains.extend(leftovers[i : i + stages] for i in range(0, len(leftovers), stages))
    chains.sort(key=lambda c: dfs_key(c[0]))
    return chains


def order_replicas(slots: Sequence[Slot], gpus_per_replica: int, parallelism: Parallelism | None) -> list[Slot]:
    """Slots in rank order."""
    ordered = sorted(slots, key=dfs_key)
    if parallelism is None or parallelism.pipeline <= 1 or gpus_per_replica == 0:
        return ordered
    world = len(ordered) * gpus_per_replica
    stages = parallelism.pipeline
    per_stage_gpus = world // stages
    if world % stages or per_stage_gpus % gpus_per_replica:
        return ordered  # a replica straddles stages: plain DFS keeps each stage contiguous
    replicas_per_stage = per_stage_gpus // gpus_per_replica
    # Megatron order (tensor fastest, pipeline slowest): replica k is in stage k // replicas_per_stage.
    # Chain j = replicas {p * replicas_per_stage + j}: the stages of one data-parallel slice.
    chains = _pipeline_chains(ordered, stages)
    by_rank: list[Slot | None] = [None] * len(ordered)
    for j, chain in enumerate(chains):
        for p, slot in enumerate(chain):
            by_rank[p * replicas_per_stage + j] = slot
    assert all(s is not None for s in by_rank)
    return [s for s in by_rank if s is not None]


def local_rank_order(node: GpuNode, gpus: Sequence[int], reference_rails: Sequence[int] | None) -> list[int]:
    """GPUs in local-rank order. The first replica sorts by NVLink island, NUMA, rail; the others
    solve an assignment so local rank j lands on the reference rail j wherever possible."""
    locality = sorted(gpus, key=lambda g: (node.nvlink[g], node.numa[g], node.rails[g], g))
    if reference_rails is None or len(reference_rails) != len(gpus):
        return locality
    if all(node.rails[g] == r for g, r in zip(locality, reference_rails, strict=True)):
        return locality
    n = len(gpus)
    cost = np.empty((n, n))
    for j, rail in enumerate(reference_rails):
        for col, g in enumerate(locality):
            # Rail mismatches dominate; the small term keeps the locality order among equals.
            cost[j, col] = (node.rails[g] != rail) * n * n + abs(j - col)
    rows, cols = linear_sum_assignment(cost)
    return [locality[c] for _, c in sorted(zip(rows, cols, strict=True))]


def pipeline_stage(rank: int, replicas: int, gpus_per_replica: int, parallelism: Parallelism | None) -> int:
    """The pipeline stage replica `rank` serves in order_replicas' layout (0 without pipelining, or
    when a replica straddles stages)."""
    if parallelism is None or parallelism.pipeline <= 1 or gpus_per_replica == 0:
        return 0
    world = replicas * gpus_per_replica
    per_stage_gpus = world // parallelism.pipeline
    if world % parallelism.pipeline or per_stage_gpus % gpus_per_replica:
        return 0
    return rank // (per_stage_gpus // gpus_per_replica)
