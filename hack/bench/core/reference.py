"""Two reference placers, for comparison only: what the default scheduler and Kueue TAS would do.

- spread: each replica to the node with the most free GPUs (kube-scheduler's LeastAllocated).
- best fit: the smallest domain at the lowest tier that fits, fullest TORs and nodes first, lowest
  GPU indices (Kueue TAS BestFit-like). Neither knows rails or ranks; ranks are in placement order.
"""

from __future__ import annotations

import heapq
from collections import Counter

from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.solver.placement import Placement
from railyard.topology.solver.request import GangRequest


def spread(snapshot: Snapshot, request: GangRequest) -> Placement | None:
    size = request.gpus_per_replica
    free = {n.name: list(snapshot.free(n)) for n in snapshot.nodes}
    heap = [(-len(f), name) for name, f in free.items() if len(f) >= size]
    heapq.heapify(heap)
    picks: list[tuple[GpuNode, tuple[int, ...]]] = []
    while len(picks) < request.replicas and heap:
        _, name = heapq.heappop(heap)
        gpus, free[name] = free[name][:size], free[name][size:]
        picks.append((snapshot.node(name), tuple(gpus)))
        if len(free[name]) >= size:
            heapq.heappush(heap, (-len(free[name]), name))
    return Placement.from_replicas(picks, snapshot.levels) if len(picks) == request.replicas else None


def best_fit(snapshot: Snapshot, request: GangRequest) -> Placement | None:
    size, need = request.gpus_per_replica, request.replicas
    slots = {n.name: len(snapshot.free(n)) // size for n in snapshot.nodes}
    nodes = [n for n in snapshot.nodes if slots[n.name] > 0]
    chosen: list[GpuNode] | None = None
    for level in (1, 2, 3, 4):
        caps: Counter[str] = Counter()
        for n in nodes:
            caps[n.domain(level) if level < 4 else "cluster"] += slots[n.name]
        fitting = sorted((cap, dom) for dom, cap in caps.items() if cap >= need)
        if fitting:
            domain = fitting[0][1]
            chosen = [n for n in nodes if level == 4 or n.domain(level) == domain]
            break
    if chosen is None:
        return None
    tor_cap: Counter[str] = Counter()
    for n in chosen:
        tor_cap[n.tor] += slots[n.name]
    chosen.sort(key=lambda n: (tor_cap[n.tor], n.tor, slots[n.name], n.name))
    picks: list[tuple[GpuNode, tuple[int, ...]]] = []
    for n in chosen:
        free = list(snapshot.free(n))
        while len(picks) < need and len(free) >= size:
            picks.append((n, tuple(free[:size])))
            free = free[size:]
        if len(picks) == need:
            break
    return Placement.from_replicas(picks, snapshot.levels)
