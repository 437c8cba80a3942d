"""The nodes a starving gang waits for (the queue's reservation, operator/decide/queue.py): the fewest
nodes that could hold it with nothing else on them, in one domain — of each domain its freest nodes
(replicas they hold now, then free GPUs), and of the domains the one whose chosen nodes are freest now.
A gang with a required tier looks only at that tier's domains. One that merely prefers a tier has
already waited out the tight placements it could get by backfill, so it looks at every level up to the
whole cluster and takes the freest choice, the lowest level among equally free ones: a 128-node gang
that held one 128-node leaf waited for every pod in it to end.

Only these are held, not the whole domain or cluster: the rest keeps serving the jobs behind it. Held
nodes stay as free as they were (nobody else may use them), so the choice only moves to other nodes
when those have become freer, and what the gang waits for shrinks from pass to pass. Computed over
arrays: the holder asks every pass, on 12,288 nodes too. `still_holds`: whether a reservation kept across passes
(one jobs were backfilled into, operator/decide/backfill.py) could still hold the gang."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.node_arrays import node_arrays
from railyard.topology.cluster.node_rules import template_indices
from railyard.topology.solver.request import GangRequest

CLUSTER = -1  # the level number of the whole cluster as one domain


def domain_codes(snapshot: Snapshot, level: int) -> tuple[NDArray[np.int64], tuple[str, ...]]:
    """Per node in snapshot order, its domain at a level as a code, and the domain ids by code (the
    codes follow the ids' name order, so comparing codes compares ids). Depends on the nodes alone:
    kept in the node memo."""
    key = ("domain codes", level)
    cached = snapshot.memo.get(key)
    if cached is None:
        if level == CLUSTER:
            ids = [""] * len(snapshot.nodes)
        else:
            ids = [snapshot.levels.domain_of(n, level) for n in snapshot.nodes]
        names = tuple(sorted(set(ids)))
        code = {name: i for i, name in enumerate(names)}
        cached = snapshot.memo[key] = (np.array([code[i] for i in ids], dtype=np.int64), names)
    return cached  # type: ignore[return-value]


def _levels(snapshot: Snapshot, request: GangRequest) -> list[int]:
    if request.required_tier is not None:
        return [snapshot.levels.index(request.required_tier)]
    return [*range(1, snapshot.levels.depth + 1), CLUSTER]


def reserved_nodes(snapshot: Snapshot, request: GangRequest) -> frozenset[str]:
    need, per = request.smallest, request.gpus_per_replica
    arrays = node_arrays(snapshot)
    eligible = template_indices(snapshot, request)
    free_gpus = snapshot.node_usage().free[eligible]
    if per:
        capacity, slots = arrays.gpu_count[eligible] // per, free_gpus // per
    else:  # GPU-less replicas: any node holds them all
        capacity, slots = np.full(len(eligible), need, dtype=np.int64), free_gpus
    usable = capacity > 0
    eligible, free_gpus, capacity, slots = eligible[usable], free_gpus[usable], capacity[usable], slots[usable]
    rank = arrays.name_rank[eligible]
    best: tuple[tuple[float, float], NDArray[np.int64]] | None = None
    for level in _levels(snapshot, request):
        codes, names = domain_codes(snapshot, level)
        domain = codes[eligible]
        total = np.bincount(domain, weights=capacity, minlength=len(names))
        if not (total >= need).any():
            continue
        # Per domain, freest first; a node is chosen while the domain's nodes before it hold fewer than `need`.
        order = np.lexsort((rank, -free_gpus, -slots, domain))
        domain_sorted, capacity_sorted = domain[order], capacity[order]
        before = np.cumsum(capacity_sorted) - capacity_sorted
        starts = np.searchsorted(domain_sorted, domain_sorted, side="left")
        before -= before[starts]
        chosen = order[before < need]
        held_slots = np.bincount(domain[chosen], weights=slots[chosen], minlength=len(names))
        held_free = np.bincount(domain[chosen], weights=free_gpus[chosen], minlength=len(names))
        feasible = np.flatnonzero(total >= need)
        # The freest domain; ties to the first id by name (codes are in name order).
        pick = feasible[np.lexsort((feasible, -held_free[feasible], -held_slots[feasible]))[0]]
        freeness = (float(held_slots[pick]), float(held_free[pick]))
        if best is None or freeness > best[0]:  # strictly freer: equal ones stay at the lower level
            best = (freeness, eligible[chosen[domain[chosen] == pick]])
    if best is None:
        return frozenset()
    nodes = snapshot.nodes
    return frozenset(nodes[i].name for i in best[1].tolist())


def still_holds(snapshot: Snapshot, request: GangRequest, nodes: frozenset[str]) -> bool:
    """Whether a reservation kept from an earlier pass could still hold the request's smallest gang with nothing
    else on its nodes: every node still there and eligible for the template, their capacity enough (a taint, a
    drop in allocatable GPUs or a larger request since would leave it holding nodes it cannot use)."""
    positions = snapshot.positions()
    if not nodes or any(n not in positions for n in nodes):
        return False
    indices = [positions[n] for n in nodes]
    if not set(indices) <= set(template_indices(snapshot, request).tolist()):
        return False
    per = request.gpus_per_replica
    if not per:
        return True
    counts = node_arrays(snapshot).gpu_count
    return sum(int(counts[i]) // per for i in indices) >= request.smallest
