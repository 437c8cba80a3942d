"""Replacement placement after node loss: keep every healthy rank where it is, re-home only the lost
ranks, next to where they were.

Rules (Kueue's node hot swap, extended to many nodes at once, as kueue#14244 asks):
- survivors keep node, GPUs and rank; the snapshot given still counts their GPUs as used;
- replacements stay inside the domain of the job's required tier that the survivors occupy;
- each lost rank prefers a node in its lost node's TOR, then leaf, then spine (distance 1..4), on the
  placement's rails (required alignment: only the same rails; preferred: off-rail slots come last);
- the lost ranks are matched to replacement slots jointly, as one assignment problem
  (`scipy.optimize.linear_sum_assignment` over ranks x slots, cost = topology distance, then best
  fit), so the ranks of several lost nodes never compete one at a time for the nearest node.
A lost rank inherits its position (rank number, hence its tensor/pipeline/data coordinates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from railyard.topology.cluster.affinity import NodeLimits
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.eligibility import PodConstraints
from railyard.topology.cluster.levels import Levels
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.cluster.resources import replicas_that_fit
from railyard.topology.solver.placement import solve
from railyard.topology.solver.quality import tier_distance as distance
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.slots import RailTarget, free_rail_counts, pick_gpus, slots_for_target
from scipy.optimize import linear_sum_assignment

_MISALIGNED = 10  # cost of a replacement off the placement's rails (preferred alignment): above any distance
_GPU_ONLY = frozenset({"nvidia.com/gpu"})


@dataclass(frozen=True)
class RankSlot:
    rank: int
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Replacement:
    rank: int
    lost: str  # the node the rank was on
    new: str
    gpus: tuple[int, ...]
    distance: int  # 0 same node, 1 same TOR, 2 same leaf, 3 same spine, 4 elsewhere
    aligned: bool

    @property
    def same_tor(self) -> bool:
        return self.distance <= 1


@dataclass(frozen=True)
class ReplacementDecision:
    replacements: tuple[Replacement, ...]
    reason: str | None  # why no replacement exists (then `replacements` is empty)

    @property
    def found(self) -> bool:
        return self.reason is None


def _whole(snapshot: Snapshot, request: GangRequest, lost: Sequence[RankSlot], known: Mapping[str, GpuNode],
           limits: NodeLimits | None, avoid: frozenset[str]) -> ReplacementDecision:
    """Every rank lost (a whole gang moved): placed afresh by the solver, so its required tier holds for
    the new homes too (the nearest free slots one by one could scatter it across domains)."""
    ordered = sorted(lost, key=lambda s: s.rank)
    whole = GangRequest(**{**request.__dict__, "replicas": len(ordered), "min_replicas": len(ordered)})
    decision = solve(snapshot.without_nodes(avoid), whole, limits)
    if decision.placement is None:
        return ReplacementDecision((), decision.reason or "no placement")
    out = []
    for slot, replica in zip(ordered, decision.placement.replicas, strict=True):
        old, new = known.get(slot.node), snapshot.node(replica.node)
        out.append(Replacement(slot.rank, slot.node, replica.node, replica.gpus,
                               distance(old, new) if old is not None else 4, decision.placement.rail_aligned))
    return ReplacementDecision(tuple(out), None)


def _target(keep: Sequence[RankSlot], lost: Sequence[RankSlot], nodes: Mapping[str, GpuNode]) -> RailTarget | None:
    """The rails every replica covers, when the placement was rail-aligned (None otherwise)."""
    targets = {tuple(sorted(nodes[s.node].rails[g] for g in s.gpus)) for s in (*keep, *lost)
               if s.node in nodes and s.gpus}  # a slot without GPUs (an anchor for growth) has no rails
    return targets.pop() if len(targets) == 1 else None


def solve_replacement(snapshot: Snapshot, request: GangRequest, keep: Sequence[RankSlot], lost: Sequence[RankSlot],
                      lost_nodes: Mapping[str, GpuNode], limits: NodeLimits | None = None,
                      avoid: frozenset[str] = frozenset()) -> ReplacementDecision:
    """New homes for the `lost` ranks. `snapshot` excludes the lost nodes and counts the survivors'
    GPUs as used; `lost_nodes` are the models of the lost nodes (for distances and rails)."""
    if not lost:
        return ReplacementDecision((), None)
    size = request.gpus_per_replica
    known = {**{n.name: n for n in snapshot.nodes}, **lost_nodes}
    if not keep and request.required_tier is not None:
        return _whole(snapshot, request, lost, known, limits, avoid)
    target = _target(keep, lost, known)
    scope = _scope(request, keep, known, snapshot.levels)
    constraints = PodConstraints(request.pod_spec)
    columns: list[tuple[GpuNode, int, bool]] = []  # (node, slot index on it, on the target's rails)
    levels = snapshot.levels
    for node in snapshot.nodes:
        if node.name in avoid or node.name in lost_nodes or (scope and levels.domain_of(node, scope[0]) != scope[1]):
            continue
        if node.gpu_count < size or constraints.reject_reason(node) or (limits and node.name in limits.rejected):
            continue
        if keep and node.product != known[keep[0].node].product:
            continue  # a gang never mixes GPU products
        free = snapshot.free(node)
        aligned = slots_for_target(free_rail_counts(node, free), target) if target and size else 0
        total = len(free) // size if size else 1
        if request.rail_alignment == RailAlignment.REQUIRED and target is not None:
            total = aligned
        if request.resources and node.allocatable:
            fit, _ = replicas_that_fit(node.allocatable, snapshot.requested_on(node.name), request.resources,
                                       _GPU_ONLY)
            total = min(total, fit)
            aligned = min(aligned, fit)
        if limits and node.name in limits.caps:
            total = min(total, limits.caps[node.name])
            aligned = min(aligned, total)
        columns += [(node, i, i < aligned) for i in range(min(total, len(lost)))]
    # Ties (same distance, same fit) go to the TOR with the most candidate slots, then TOR by TOR, so
    # ranks that cannot stay near their old home land packed instead of scattered across a spine.
    per_tor: dict[str, int] = {}
    for node, _, _ in columns:
        per_tor[node.domain(1)] = per_tor.get(node.domain(1), 0) + 1
    columns.sort(key=lambda c: (-per_tor[c[0].domain(1)], c[0].domain(1), c[0].name, c[1]))
    if len(columns) < len(lost):
        where = f"inside {scope[1]}" if scope else "in the cluster"
        return ReplacementDecision((), f"{len(lost)} lost ranks need replacement slots {where}; only "
                                       f"{len(columns)} free" + (" on the placement's rails" if target else ""))
    cost = np.empty((len(lost), len(columns)))
    for i, slot in enumerate(lost):
        old = known.get(slot.node)  # a node never seen usable has no position: every slot is as far
        for j, (node, index, aligned) in enumerate(columns):
            free_after = len(snapshot.free(node)) - (index + 1) * size
            # the placement's rails first (off-rail slows every data-parallel ring; one more hop only this
            # rank's), then distance, then best fit (fuller nodes), then node order
            off_rails = 0 if aligned or target is None else _MISALIGNED
            cost[i, j] = ((distance(old, node) if old else 4) + off_rails) * 100 + free_after + j * 1e-6
    rows, cols = linear_sum_assignment(cost)
    chosen: dict[str, list[tuple[int, bool]]] = {}
    for i, j in zip(rows, cols, strict=True):
        node, _, aligned = columns[j]
        chosen.setdefault(node.name, []).append((i, aligned))
    out: list[Replacement] = []
    for name, picks in chosen.items():
        node = known[name]
        use_target = target if all(a for _, a in picks) and target is not None else None
        groups = pick_gpus(node, snapshot.free(node), len(picks), size, use_target)
        for (i, _), gpus in zip(sorted(picks), groups, strict=True):
            slot = lost[i]
            aligned = target is None or tuple(sorted(node.rails[g] for g in gpus)) == target
            old = known.get(slot.node)
            out.append(Replacement(slot.rank, slot.node, name, tuple(gpus), distance(old, node) if old else 4,
                                   aligned))
    return ReplacementDecision(tuple(sorted(out, key=lambda r: r.rank)), None)


def _scope(request: GangRequest, keep: Sequence[RankSlot], nodes: Mapping[str, GpuNode],
           levels: Levels) -> tuple[int, str] | None:
    """(tier level, domain id) the replacements must stay in: the required tier's domain of the
    survivors. None without a required tier or without survivors."""
    if request.required_tier is None or not keep:
        return None
    level = levels.index(request.required_tier)
    return (level, levels.domain_of(nodes[keep[0].node], level))
