"""The tree a gang's domains are chosen from (domains.py): the scope, then the levels of the topology
(levels.py; by default spines -> leaves -> TORs, optionally NVLink domains below the TORs), then the
nodes with free slots. A TOR whose nodes are interchangeable (one slot each, the same free GPUs: whole-
node gangs) keeps them as `members` and builds no node Domains.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from railyard.topology.cluster.levels import DEFAULT_LEVELS, Levels
from railyard.topology.cluster.model import GpuNode
from railyard.topology.cluster.node_arrays import NodeArrays

# counts[level]: distinct domains used at that level, bottom-up (0 nodes, then each level of
# levels.Levels: by default 1 TORs, 2 leaves, 3 spines).
Counts = tuple[int, ...]


@dataclass(slots=True)
class Domain:
    id: str
    level: int
    sort_key: tuple[str, ...]
    cap: int = 0
    children: list[Domain] = field(default_factory=list)
    node: GpuNode | None = None
    free_gpus: int = 0  # nodes (and `members`): best fit packs the fullest node, keeping empty nodes whole
    empty: bool = False  # nodes (and `members`): every GPU free
    # A TOR of interchangeable nodes (one slot each, the same free GPUs), in name order: their
    # Domains are never built (on 12,288 nodes, whole-node gangs: most of what building the tree cost).
    members: tuple[GpuNode, ...] = ()
    unit_cost: int = 0   # nodes only: the cost of using it (set by the DP)
    census: tuple[tuple[int, ...], int, int] = ((), 0, 0)  # root only: see build_tree


def build_tree(slots: Sequence[tuple[GpuNode, int]], top_level: int, scope_id: str = "scope",
               free_gpus: Callable[[GpuNode], int] | None = None, levels: Levels = DEFAULT_LEVELS,
               table: NodeArrays | None = None, free: NDArray[np.int64] | None = None,
               at: NDArray[np.intp] | None = None, counts: NDArray[np.int64] | None = None) -> Domain:
    """A tree of the nodes with free slots, from `top_level` down (the root is the scope). A domain
    is its path from the top, so ids only need to be unique among siblings. With the arrays of the
    snapshot the slots come from (`table`, and `free`: its free GPUs per node) nodes are sorted into
    TORs with numpy (12,288 nodes: the loop a node was a third of a solve); `at` and `counts`, the
    slots' node indices in the snapshot and their slots, spare reading them from `slots`."""
    root = Domain(scope_id, top_level + 1, ())
    depth = levels.depth
    if table is not None and table.tor is not None and free is not None and top_level > 0:
        lowest, nodes, max_free = _tors_by_arrays(slots, table, table.tor, free, levels, at, counts)
    else:
        lowest, nodes, max_free = _lowest_by_loop(root, slots, top_level, free_gpus, levels)
    level_sizes = [nodes, len(lowest)]
    below = list(lowest.values())
    for level in range(2, top_level + 1):
        parents: dict[str, Domain] = {}
        for child in below:
            key = child.sort_key[depth - level]  # network ids are unique per level
            parent = parents.get(key)
            if parent is None:
                parent = parents[key] = Domain(key, level, child.sort_key[: depth + 1 - level])
            parent.children.append(child)
            parent.cap += child.cap
        level_sizes.append(len(parents))
        below = list(parents.values())
    if top_level > 0:
        root.children = below
    root.cap = sum(c.cap for c in root.children)
    # Domains per level, the most children any domain has, the most free GPUs of a node: bounds
    # of the cost components (_weights).
    level_sizes = level_sizes[: top_level + 1] + [0] * (depth + 1 - min(len(level_sizes), top_level + 1))
    widest = max((len(t.children) or len(t.members) for t in lowest.values()), default=0)
    root.census = (tuple(level_sizes), max(widest, len(root.children), 8), max_free)
    return root


def _lowest_by_loop(root: Domain, slots: Sequence[tuple[GpuNode, int]], top_level: int,
                    free_gpus: Callable[[GpuNode], int] | None,
                    levels: Levels) -> tuple[dict[tuple[str, ...], Domain], int, int]:
    """Nodes into their lowest domains (TORs, or NVLink domains within them), one node at a time;
    with `top_level` 0 the nodes go straight under the root. (lowest domains, nodes, most free GPUs)"""
    lowest: dict[tuple[str, ...], Domain] = {}
    max_free = 0
    nodes = 0
    nvlink = levels.nvlink
    network_depth = len(levels.network)
    raw: dict[object, list[tuple[GpuNode, int, int]]] = {}
    for node, count in slots:
        if count <= 0:
            continue
        nodes += 1
        free = free_gpus(node) if free_gpus else 0
        if free > max_free:
            max_free = free
        if len(node.network_path) != network_depth:
            levels.path(node)  # raises: a node of another depth
        if top_level == 0:
            root.children.append(Domain(node.name, 0, (*levels.path(node), node.name), count, node=node,
                                        free_gpus=free, empty=free == node.gpu_count))
            continue
        # Keyed by the TOR id (and the NVLink domain within it): ids are unique per level, and a
        # string key is a third cheaper than the path on 12,288 nodes.
        key = (node.tor, node.nvlink_domain or node.name) if nvlink else node.tor
        members = raw.get(key)
        if members is None:
            members = raw[key] = []
        members.append((node, count, free))
    for members in raw.values():
        above = levels.path(members[0][0])  # the TOR's path (with the NVLink domain, if any)
        tor = lowest[above] = Domain(above[-1], 1, above)
        shapes = {(count, free, free == node.gpu_count) for node, count, free in members}
        if len(shapes) == 1 and next(iter(shapes))[0] == 1:
            _, tor.free_gpus, tor.empty = shapes.pop()
            tor.members = tuple(sorted((node for node, _, _ in members), key=lambda n: n.name))
            tor.cap = len(members)
            continue
        for node, count, free in members:
            tor.children.append(Domain(node.name, 0, (*above, node.name), count, node=node, free_gpus=free,
                                          empty=free == node.gpu_count))
            tor.cap += count
    return lowest, nodes, max_free


def _tors_by_arrays(slots: Sequence[tuple[GpuNode, int]], table: NodeArrays, tor_of: NDArray[np.int64],
                    free_of: NDArray[np.int64], levels: Levels, at: NDArray[np.intp] | None,
                    slot_counts: NDArray[np.int64] | None) -> tuple[dict[tuple[str, ...], Domain], int, int]:
    """_lowest_by_loop's TORs, sorted out with numpy: only TORs whose nodes differ build node Domains."""
    count = len(slots)
    if at is None or slot_counts is None:
        where = table.where
        at = np.fromiter((where[node.name] for node, _ in slots), dtype=np.intp, count=count)
        slot_counts = np.fromiter((c for _, c in slots), dtype=np.int64, count=count)
    kept = np.flatnonzero(slot_counts > 0)
    lowest: dict[tuple[str, ...], Domain] = {}
    if not len(kept):
        return lowest, 0, 0
    at, slot_counts = at[kept], slot_counts[kept]
    free = free_of[at]
    empty = free == table.gpu_count[at]
    tor = tor_of[at]
    order = np.lexsort((table.name_rank[at], tor))  # by TOR, then by name
    bounds = np.flatnonzero(np.diff(tor[order])) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(order)]))
    sorted_counts, sorted_free, sorted_empty = slot_counts[order], free[order], empty[order]
    # A TOR of interchangeable nodes: one slot each, the same free GPUs, all empty or none.
    one_slot = np.minimum.reduceat(sorted_counts, starts) == np.maximum.reduceat(sorted_counts, starts)
    one_slot &= np.maximum.reduceat(sorted_counts, starts) == 1
    same_free = np.minimum.reduceat(sorted_free, starts) == np.maximum.reduceat(sorted_free, starts)
    same_empty = np.minimum.reduceat(sorted_empty, starts) == np.maximum.reduceat(sorted_empty, starts)
    uniform = (one_slot & same_free & same_empty).tolist()
    slot_of = kept[order].tolist()
    counts_list, free_list, empty_list = sorted_counts.tolist(), sorted_free.tolist(), sorted_empty.tolist()
    for group, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        above = levels.path(slots[slot_of[lo]][0])
        domain = lowest[above] = Domain(above[-1], 1, above)
        if uniform[group]:
            domain.free_gpus, domain.empty = free_list[lo], empty_list[lo]
            domain.members = tuple(slots[i][0] for i in slot_of[lo:hi])
            domain.cap = hi - lo
            continue
        for k in range(lo, hi):
            node = slots[slot_of[k]][0]
            domain.children.append(Domain(node.name, 0, (*above, node.name), counts_list[k], node=node,
                                          free_gpus=free_list[k], empty=empty_list[k]))
            domain.cap += counts_list[k]
    return lowest, len(kept), int(free.max())


def counts_of(takes: list[tuple[GpuNode, int]], levels: Levels = DEFAULT_LEVELS) -> Counts:
    """Distinct domains used at each level, bottom-up (nodes first)."""
    paths = [(*levels.path(n), n.name) for n, k in takes if k > 0]
    size = levels.depth + 1
    return tuple(len({p[: size - level] for p in paths}) for level in range(size))
