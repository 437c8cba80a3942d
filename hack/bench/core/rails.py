"""railAlignment: required against brute force on tiny random clusters: how often the solver places
a gang whenever some rail-aligned placement exists (acceptance) and never when none does."""

from __future__ import annotations

import random
from collections import Counter
from itertools import combinations_with_replacement
from typing import Any

from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.solver.placement import solve
from railyard.topology.solver.request import GangRequest

EIGHT = tuple(range(8))


def rail_node(name: str, rails: tuple[int, ...] = EIGHT) -> GpuNode:
    """An 8-GPU node in one TOR with these rails (two NUMA halves, one NVLink island)."""
    return GpuNode(name, "s", "l", "t", rails, tuple(i // 4 for i in range(len(rails))), (0,) * len(rails))


def aligned_placement_exists(snap: Snapshot, replicas: int, size: int) -> bool:
    """Brute force: some multiset of rails gives enough disjoint replicas over all nodes; or the whole
    gang fits on one node (no cross-node ring edge); or it fills an even number of whole free nodes,
    k replicas each (the snake order)."""
    if any(len(snap.free(n)) // size >= replicas for n in snap.nodes):
        return True
    per_node = 8 // size
    whole = Counter(n.rail_set for n in snap.nodes if len(snap.free(n)) == 8)  # by rail layout
    if 8 % size == 0 and per_node >= 2 and replicas % per_node == 0 and (replicas // per_node) % 2 == 0 and \
            max(whole.values(), default=0) >= replicas // per_node:
        return True
    rails = sorted({r for n in snap.nodes for r in n.rails})
    for target in combinations_with_replacement(rails, size):
        need = Counter(target)
        total = 0
        for n in snap.nodes:
            free = Counter(n.rails[g] for g in snap.free(n))
            total += min(free[r] // k for r, k in need.items())
        if total >= replicas:
            return True
    return False


def random_cluster(rng: random.Random) -> Snapshot:
    """1-3 nodes, rails one per GPU, two GPUs a rail or random; up to 6 GPUs of each busy."""
    nodes, used = [], {}
    for i in range(rng.randint(1, 3)):
        layout = rng.choice(["rail-per-gpu", "two-per-rail", "random"])
        rails = EIGHT if layout == "rail-per-gpu" else tuple(g // 2 for g in range(8)) if layout == "two-per-rail" \
            else tuple(rng.randint(0, 7) for _ in range(8))
        node = rail_node(f"n{i}", rails)
        nodes.append(node)
        used[node.name] = frozenset(rng.sample(range(8), rng.randint(0, 6)))
    return Snapshot(tuple(nodes), used)


def rail_required_acceptance(samples: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    feasible = placed_when_feasible = placed_when_not = 0
    for _ in range(samples):
        snap, replicas, size = random_cluster(rng), rng.randint(2, 5), rng.randint(1, 4)
        placed = solve(snap, GangRequest("j", replicas, size, rail_alignment=RailAlignment.REQUIRED)).placed
        if aligned_placement_exists(snap, replicas, size):
            feasible += 1
            placed_when_feasible += placed
        else:
            placed_when_not += placed
    return {"instances": samples, "feasible_by_brute_force": feasible, "placed_when_feasible": placed_when_feasible,
            "acceptance": round(placed_when_feasible / max(feasible, 1), 4), "placed_when_infeasible": placed_when_not}
