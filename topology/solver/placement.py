"""The placement decision: a pure function of (snapshot, gang request).

Steps: filter eligible nodes -> per-node slots for the best rail target -> choose domains (select)
-> choose GPUs per slot (slots) -> rank order (ranks). All or nothing: either every replica (or, for
elastic jobs, the largest count between minReplicas and replicas) gets a slot, or none does and the
decision carries a reason naming the binding constraint.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from railyard.topology.cluster.affinity import NodeLimits
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.levels import NODE, LevelError, Levels
from railyard.topology.cluster.model import GpuNode, Snapshot, all_gpus
from railyard.topology.cluster.node_arrays import node_arrays
from railyard.topology.cluster.node_rules import eligible_nodes
from railyard.topology.solver.domain_tree import build_tree
from railyard.topology.solver.domains import Objective, Selection, objective_for, select_best
from railyard.topology.solver.graph_mapping import map_ranks
from railyard.topology.solver.quality import domains_per_level, domains_spanned, rail_aligned, rails_of, ring_cost
from railyard.topology.solver.rank_order import local_rank_order
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.reservation import domain_codes
from railyard.topology.solver.slots import (
    FreePattern,
    RailTarget,
    capacity_targets,
    free_pattern,
    natural_targets,
    pattern_slots,
    pick_gpus,
)

_MAX_RAIL_TARGETS = 8


@dataclass(frozen=True)
class ReplicaPlacement:
    rank: int
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    replicas: tuple[ReplicaPlacement, ...]
    tors: int
    leaves: int
    spines: int
    rail_aligned: bool
    ring_cost: int
    # (level name, domains touched) for every level, top to bottom: the counts above, plus any
    # level above the spine and the NVLink-domain level when the topology has them.
    domains: tuple[tuple[str, int], ...] = ()

    @property
    def allocations(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(r.node, r.gpus) for r in self.replicas]

    @classmethod
    def from_replicas(cls, replicas: Sequence[tuple[GpuNode, Sequence[int]]], levels: Levels) -> Placement:
        """A placement of these (node, GPUs in local-rank order), in rank order, with its metrics
        (domains counted at the cluster's levels: the snapshot's)."""
        nodes = [n for n, _ in replicas]
        tors, leaves, spines = domains_spanned(nodes)
        aligned = any(gpus for _, gpus in replicas) and rail_aligned(replicas)
        return cls(tuple(ReplicaPlacement(i, n.name, tuple(g)) for i, (n, g) in enumerate(replicas)),
                   tors, leaves, spines, aligned, ring_cost(nodes), domains_per_level(nodes, levels))


@dataclass(frozen=True)
class Decision:
    request: GangRequest
    placement: Placement | None
    reason: str | None

    @property
    def placed(self) -> bool:
        return self.placement is not None


@dataclass
class _Candidate:
    """One way to fill the gang: a rail target (or none) and the slots it gives per node; where
    known, the same as arrays (the nodes' indices in the snapshot, their slots) for build_tree."""

    target: RailTarget | None
    slots: list[tuple[GpuNode, int]]
    at: NDArray[np.intp] | None = None
    counts: NDArray[np.int64] | None = None

    @property
    def capacity(self) -> int:
        return int(self.counts.sum()) if self.counts is not None else sum(c for _, c in self.slots)


def _candidates(snapshot: Snapshot, nodes: Sequence[GpuNode], at: NDArray[np.intp], request: GangRequest,
                caps: Mapping[str, int] | None = None) -> list[_Candidate]:
    """`at`: the nodes' indices in the snapshot."""
    caps = caps or {}
    candidates = _gpu_candidates(snapshot, nodes, at, request)
    if not caps:
        return candidates
    capped = ((c.target, [(n, min(k, caps.get(n.name, k))) for n, k in c.slots]) for c in candidates)
    return [_Candidate(target, [(n, k) for n, k in slots if k > 0]) for target, slots in capped]


def _gpu_candidates(snapshot: Snapshot, nodes: Sequence[GpuNode], at: NDArray[np.intp],
                    request: GangRequest) -> list[_Candidate]:
    size = request.gpus_per_replica
    if size == 0:
        return [_Candidate(None, [(n, 1) for n in nodes], at, np.ones(len(at), dtype=np.int64))]
    # The nodes with at least `size` free GPUs, counted from the snapshot's arrays.
    free_now = snapshot.node_usage().free[at]
    fits = np.flatnonzero(free_now >= size)
    at, free_now = at[fits], free_now[fits]
    counts = free_now // size
    fitting = [nodes[i] for i in fits.tolist()]
    unaligned = _Candidate(None, list(zip(fitting, counts.tolist(), strict=True)), at, counts)
    if request.rail_alignment == RailAlignment.NONE or request.replicas == 1:
        return [unaligned]  # a single replica has no peers to align with
    table = node_arrays(snapshot)
    rails = table.rail_code[at]
    if len(at) and bool((table.gpu_count[at] == size).all()) and bool((rails == rails[0]).all()):
        # Whole-node replicas on one node shape: every free node is aligned on its rails (the
        # general path below finds the same single candidate, at twice the cost on 12k nodes).
        return [_Candidate(table.rail_sets[int(rails[0])], unaligned.slots, at, counts)]
    # Only partly used nodes read their free indices.
    frees = [(node, all_gpus(count) if count == node.gpu_count else snapshot.free(node))
             for node, count in zip(fitting, free_now.tolist(), strict=True)]
    weights: Counter[RailTarget] = Counter()
    patterns: Counter[FreePattern] = Counter()
    rail_patterns: dict[str, FreePattern] = {}
    for node, free in frees:
        if node.gpu_count == size:
            weights[node.rail_set] += 1  # whole-node replicas: the node's rails
        else:
            for target in natural_targets(node.rails, node.numa, node.nvlink, size):
                weights[target] += 1
            pattern = rail_patterns[node.name] = free_pattern(node, free)
            patterns[pattern] += 1
    targets = [t for t, _ in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:_MAX_RAIL_TARGETS]]
    # Plus the targets the free GPUs actually offer most slots for: partly used nodes may align on
    # rails no empty-node grouping suggests.
    targets += [t for t in capacity_targets(patterns, size, _MAX_RAIL_TARGETS) if t not in targets]
    aligned: list[_Candidate] = []
    for target in targets:
        slots: list[tuple[GpuNode, int]] = []
        for node, free in frees:
            if node.gpu_count == size:
                count = int(len(free) == size and node.rail_set == target)
            else:
                count = pattern_slots(rail_patterns[node.name], target)
            if count:
                slots.append((node, count))
        aligned.append(_Candidate(target, slots))
    if request.rail_alignment == RailAlignment.REQUIRED:
        return aligned
    if len(aligned) == 1 and aligned[0].slots == [(n, c) for n, c in unaligned.slots if c]:
        return aligned  # every usable slot is already aligned: nothing to fall back to
    return [*aligned, unaligned]


def _scopes(snapshot: Snapshot, candidate: _Candidate, request: GangRequest) -> list[tuple[str, _Candidate]]:
    """The domains the whole gang may live in: one per domain of the required tier, else the cluster.
    Each node's domain comes from the snapshot's memo (reservation.domain_codes), kept across solves."""
    if request.required_tier is None:
        return [("cluster", candidate)]
    codes, names = domain_codes(snapshot, snapshot.levels.index(request.required_tier))
    where = node_arrays(snapshot).where
    domain_of = codes.tolist()
    groups: dict[str, list[tuple[GpuNode, int]]] = {}
    for node, count in candidate.slots:
        groups.setdefault(names[domain_of[where[node.name]]], []).append((node, count))
    return [(scope, _Candidate(candidate.target, slots)) for scope, slots in sorted(groups.items())]


def _top_level(request: GangRequest, levels: Levels) -> int:
    """The highest tier the selection tree starts from: below the required tier's scope."""
    return levels.depth if request.required_tier is None else levels.index(request.required_tier) - 1


@dataclass
class _Option:
    candidate: _Candidate
    selection: Selection
    scope_cap: int
    scope_id: str


def _objective(request: GangRequest, levels: Levels) -> Objective:
    return objective_for(levels.index(request.preferred_tier) if request.preferred_tier else None, levels.depth)


def _cannot_win(scope: _Candidate, need: int, objective: Objective, depth: int, free: Callable[[GpuNode], int],
                best: tuple) -> bool:
    """Whether no selection in the scope can beat `best` (objective, broken) on those two: none uses
    fewer than one domain at each network level and the fewest nodes whose slots hold `need`, nor
    breaks fewer whole nodes than that many when the scope has no partly used node."""
    counts = sorted((c for _, c in scope.slots), reverse=True)
    nodes, held = 0, 0
    for count in counts:
        if held >= need:
            break
        nodes, held = nodes + 1, held + count
    bound = objective((nodes,) + (1,) * depth)
    if bound != best[0]:
        return bound > best[0]
    partly_used = any(free(node) < node.gpu_count for node, _ in scope.slots)
    return (0 if partly_used else nodes) >= best[1]


def _best_option(snapshot: Snapshot, candidate: _Candidate, request: GangRequest, need: int,
                 scopes: list[tuple[str, _Candidate]]) -> _Option | None:
    levels = snapshot.levels
    objective = _objective(request, levels)
    top = _top_level(request, levels)
    best: tuple | None = None
    chosen: _Option | None = None
    table = node_arrays(snapshot)
    free_now = snapshot.node_usage().free
    free_gpus, where = free_now.tolist(), table.where
    free = lambda n: free_gpus[where[n.name]]  # noqa: E731
    # Smallest scopes first, the key's own tie-break: a later scope whose lower bound already ties the
    # best found cannot win, and its tree is never built (a 2 x 4 gang that must fit one TOR looked at
    # every TOR of 2,048 nodes: 150 ms; the result is the same).
    ordered = sorted(((scope.capacity, scope_id, scope) for scope_id, scope in scopes), key=lambda e: e[:2])
    for cap, scope_id, scope in ordered:
        if cap < need:
            continue
        if best is not None and top >= 0 and _cannot_win(scope, need, objective, levels.depth, free, best):
            continue
        slots = scope.slots
        if top < 0:  # requiredTier node: the scope is one node
            selection = Selection((1,) + (0,) * levels.depth, [(slots[0][0], need)],
                                  int(free(slots[0][0]) == slots[0][0].gpu_count))
        else:
            in_nvlink = (_in_one_nvlink_domain(slots, top, need, objective, free, levels)
                         if table.nvlink_domains else None)
            tree = build_tree(slots, top, scope_id, free, levels, table, free_now, scope.at, scope.counts)
            selection = in_nvlink or select_best(tree, need, objective, levels)
        key = (objective(selection.counts), selection.broken, cap, scope_id)
        if best is None or key < best:
            best, chosen = key, _Option(candidate, selection, cap, scope_id)
    return chosen


def _in_one_nvlink_domain(slots: list[tuple[GpuNode, int]], top: int, need: int, objective: Objective,
                          free: Callable[[GpuNode], int], levels: Levels) -> Selection | None:
    """A gang that fits in one NVLink domain (`nvidia.com/gpu.clique`, e.g. a GB200 NVL72 rack)
    stays in it: its traffic then never leaves NVLink, which no TOR count can beat. Among the
    domains that hold it, the best by the objective, then the smallest (best fit). None when no
    domain holds it (the gang is then placed over the network as usual)."""
    domains: dict[str, list[tuple[GpuNode, int]]] = {}
    for node, count in slots:
        if node.nvlink_domain:
            domains.setdefault(node.nvlink_domain, []).append((node, count))
    best: tuple | None = None
    chosen: Selection | None = None
    for domain_id, members in sorted(domains.items()):
        cap = sum(c for _, c in members)
        if cap < need:
            continue
        selection = select_best(build_tree(members, top, domain_id, free, levels), need, objective, levels)
        key = (objective(selection.counts), selection.broken, cap, domain_id)
        if best is None or key < best:
            best, chosen = key, selection
    return chosen


def _build_placement(snapshot: Snapshot, option: _Option, request: GangRequest) -> Placement:
    size = request.gpus_per_replica
    slots: list[tuple[GpuNode, tuple[int, ...]]] = []
    for node, count in option.selection.takes:
        for gpus in pick_gpus(node, snapshot.free(node), count, size, option.candidate.target):
            slots.append((node, gpus))
    ordered = map_ranks(slots, size, request.parallelism, request.model)
    reference: list[int] | None = None
    final: list[tuple[GpuNode, list[int]]] = []
    for node, gpus in ordered:
        local = local_rank_order(node, gpus, reference)
        if reference is None:
            reference = list(rails_of(node, local))
        final.append((node, local))
    return Placement.from_replicas(final, snapshot.levels)


def _unit(size: int, nodes: Sequence[GpuNode]) -> str:
    if nodes and all(n.gpu_count == size for n in nodes):
        return "free whole nodes"
    return f"free slots of {size} GPUs"


def _level_label(name: str) -> str:
    return "TOR" if name == "tor" else name


def _explain(request: GangRequest, nodes: Sequence[GpuNode], rejected: Counter[str],
             candidates: Sequence[_Candidate], levels: Levels) -> str:
    need = request.smallest
    size = request.gpus_per_replica
    unit = _unit(size, nodes)
    excluded = ", ".join(f"{count} {why}" for why, count in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])))
    if not nodes:
        return f"no eligible nodes for {size}-GPU replicas" + (f" (excluded: {excluded})" if excluded else "")
    best = max(candidates, key=lambda c: sum(n for _, n in c.slots), default=None)
    slots = best.slots if best else []
    shown = range(1, levels.depth + 1)
    per_tier: dict[int, Counter[str]] = {level: Counter() for level in shown}
    for node, count in slots:
        for level in shown:
            per_tier[level][levels.domain_of(node, level)] += count
    total = sum(c for _, c in slots)
    largest = {level: per_tier[level].most_common(1)[0] if per_tier[level] else ("-", 0) for level in per_tier}
    context = ", ".join(f"largest {_level_label(levels.name(lv))} {largest[lv][1]}" for lv in shown)
    if request.required_tier is not None and request.required_tier != NODE:
        level = levels.index(request.required_tier)
        dom, cap = largest[level]
        message = (f"requiredTier {request.required_tier}: largest {_level_label(request.required_tier)} ({dom}) "
                   f"has {cap} {unit}, job needs {need}")
    elif request.required_tier == NODE:
        cap = max((c for _, c in slots), default=0)
        message = f"requiredTier node: largest node has {cap} {unit}, job needs {need}"
    else:
        message = f"cluster has {total} {unit} on {len(nodes)} eligible nodes, job needs {need}"
    if request.rail_alignment == RailAlignment.REQUIRED and best is not None and best.target is not None:
        message += f"; railAlignment required (rails {'.'.join(map(str, best.target))})"
    message += f" ({context})"
    if excluded:
        message += f"; excluded nodes: {excluded}"
    return message


def solve(snapshot: Snapshot, request: GangRequest, limits: NodeLimits | None = None) -> Decision:
    """Place the gang on the snapshot, or say why it cannot be placed. Deterministic. `limits`: what
    the template's inter-pod rules exclude or cap (see affinity.py; needs the cluster's pods)."""
    # A solve allocates tens of thousands of short-lived objects (freed by reference counting); with
    # the cyclic collector on, they trigger full collections that walk the whole snapshot and, in the
    # operator, the cluster state: on 12,288 nodes a 128 x 8 solve took 63-140 ms with it, 45-50 ms off.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _solve(snapshot, request, limits)
    finally:
        if collecting:
            gc.enable()


def _solve(snapshot: Snapshot, request: GangRequest, limits: NodeLimits | None) -> Decision:
    if request.gpus_per_replica < 0 or request.replicas < 1:
        return Decision(request, None, "replicas must be >= 1 and GPUs per replica >= 0")
    try:
        snapshot.levels.check_tiers(request.required_tier, request.preferred_tier)
    except LevelError as e:
        return Decision(request, None, str(e))
    nodes, at, rejected, caps = eligible_nodes(snapshot, request, limits)
    groups = _product_groups(nodes, at, request)
    best: tuple | None = None
    chosen: _Option | None = None
    candidates: list[_Candidate] = []
    for group, group_at in groups:
        candidates = _candidates(snapshot, group, group_at, request, caps)
        key, option = _best_in(snapshot, request, candidates)
        if option is not None and (best is None or key < best):
            best, chosen = key, option
    packed = _packed(snapshot, request, limits)
    if chosen is None:
        if packed is not None:
            return Decision(request, packed, None)
        # One group is every eligible node: its candidates are the ones to explain (not computed twice).
        explained = candidates if len(groups) == 1 else _candidates(snapshot, nodes, at, request, caps)
        reason = _explain(request, nodes, rejected, explained, snapshot.levels)
        if len(groups) > 1:
            sizes = ", ".join(f"{g[0].product} ({len(g)} nodes)" for g, _ in groups)
            reason += f"; GPU products are not mixed in one gang: {sizes}"
        return Decision(request, None, reason)
    placement = _build_placement(snapshot, chosen, request)
    if packed is not None and _packing_key(snapshot, packed) < _packing_key(snapshot, placement):
        placement = packed
    return Decision(request, placement, None)


def _packing_key(snapshot: Snapshot, placement: Placement) -> tuple:
    """Fewer domains at every level, top-down (spines, leaves, TORs by default), then rail-aligned,
    then fewer whole nodes broken (partly used nodes first: whole nodes are what big gangs need), then
    fewer nodes (more traffic on NVLink) — the domain objective's order (domains.py)."""
    nodes = {r.node for r in placement.replicas}
    broken = sum(1 for name in nodes if not snapshot.used.get(name))
    return (tuple(count for _, count in placement.domains), not placement.rail_aligned, broken, len(nodes))


def _packed(snapshot: Snapshot, request: GangRequest, limits: NodeLimits | None) -> Placement | None:
    """Partial-node replicas of a data-parallel gang packed k to a node, rail-aligned by the ring's
    cross-node edges (quality.rail_aligned): the whole gang on one node when it fits there, else an
    even number of whole nodes, each holding k replicas in a snake order (rail groups 1..k on one node,
    k..1 on the next), so every ring leaves a node on the rails it enters the next one. The nodes come
    from the solver itself (the same tiers and rules, one whole-node replica per node). None when the
    gang is not of that shape."""
    size = request.gpus_per_replica
    # railAlignment none packs by itself (and is what the one-node sub-request below uses).
    if (size == 0 or request.replicas == 1 or request.smallest != request.replicas or limits is not None
            or request.rail_alignment == RailAlignment.NONE
            or (request.parallelism is not None and request.parallelism.tensor * request.parallelism.pipeline > size)):
        return None
    best: Placement | None = None
    for gpus_per_node in sorted(node_arrays(snapshot).gpu_counts):
        per_node = gpus_per_node // size
        if request.replicas * size <= gpus_per_node:  # fits on one node: no cross-node edge at all
            one = replace(request, required_tier=NODE, preferred_tier=None,
                          rail_alignment=RailAlignment.NONE, parallelism=None)
            found = solve(snapshot, one).placement
        elif gpus_per_node % size == 0 and per_node >= 2 and request.replicas % per_node == 0 and \
                (request.replicas // per_node) % 2 == 0:
            whole = replace(request, replicas=request.replicas // per_node, min_replicas=None,
                            gpus_per_replica=gpus_per_node, parallelism=None,
                            resources={k: v * per_node for k, v in request.resources.items()})
            nodes = solve(snapshot, whole).placement
            found = _snake(snapshot, nodes, size) if nodes is not None else None
        else:
            continue
        if found is None or (request.rail_alignment == RailAlignment.REQUIRED and not found.rail_aligned):
            continue
        if best is None or _packing_key(snapshot, found) < _packing_key(snapshot, best):
            best = found
    return best


def _snake(snapshot: Snapshot, nodes: Placement, size: int) -> Placement:
    """k replicas per whole node: its GPUs in rail order cut into groups of `size`, groups 1..k on
    even-ranked nodes and k..1 on odd ones."""
    replicas: list[tuple[GpuNode, list[int]]] = []
    for i, whole in enumerate(nodes.replicas):
        node = snapshot.node(whole.node)
        by_rail = sorted(whole.gpus, key=lambda g: node.rails[g])
        groups = [by_rail[j:j + size] for j in range(0, len(by_rail), size)]
        replicas += [(node, group) for group in (groups if i % 2 == 0 else groups[::-1])]
    return Placement.from_replicas(replicas, snapshot.levels)


_PRODUCT_LABEL = "nvidia.com/gpu.product"


def mixing_allowed(pod_spec: Mapping[str, Any]) -> bool:
    """A template may accept several GPU products in one gang by listing them in a required node
    affinity term (`nvidia.com/gpu.product In [a, b]`); otherwise a gang stays on one product."""
    affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    return any(e.get("key") == _PRODUCT_LABEL and e.get("operator") == "In" and len(e.get("values") or []) > 1
               for t in affinity.get("nodeSelectorTerms") or [] for e in t.get("matchExpressions") or [])


def _product_groups(nodes: list[GpuNode], at: NDArray[np.intp],
                    request: GangRequest) -> list[tuple[list[GpuNode], NDArray[np.intp]]]:
    """The node sets a gang may be placed on (with their indices in the snapshot): one per GPU product
    (nodes without the product label form their own group), or all nodes together when the template
    accepts mixing."""
    products = {n.product for n in nodes}
    if len(products) <= 1 or mixing_allowed(request.pod_spec):
        return [(nodes, at)]
    groups = []
    for product in sorted(products):
        mine = [i for i, n in enumerate(nodes) if n.product == product]
        groups.append(([nodes[i] for i in mine], at[np.array(mine, dtype=np.intp)]))
    return groups


def _best_in(snapshot: Snapshot, request: GangRequest, candidates: list[_Candidate]) -> tuple[tuple, _Option | None]:
    best: tuple = ()
    chosen: _Option | None = None
    for index, candidate in enumerate(candidates):
        scopes = _scopes(snapshot, candidate, request)
        fit = min(request.replicas, max((scope.capacity for _, scope in scopes), default=0))
        if fit < request.smallest:
            continue
        option = _best_option(snapshot, candidate, request, fit, scopes)
        if option is None:
            continue
        # More replicas first (elastic jobs), then fewer network domains, then rail-aligned (which
        # only matters between nodes), then fewer nodes if counted, then best fit.
        counts = option.selection.counts
        objective = _objective(request, snapshot.levels)
        misaligned = candidate.target is None and counts[0] > 1
        key = (-fit, objective.network(counts), misaligned, objective(counts), option.selection.broken,
               option.scope_cap, option.scope_id, index)
        if chosen is None or key < best:
            best, chosen = key, option
    return best, chosen
