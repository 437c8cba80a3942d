"""Choosing domains for a gang: fewest domains at the tier that matters most, best fit beneath.

The tree is scope -> (spines -> leaves -> TORs ->) nodes, each node carrying how many replicas
(slots) it can host. At every level the selection uses the fewest children that can hold the
demand (largest first, then the smallest child that fits the remainder), and among single children
that fit it takes the one whose own subtree needs the fewest domains, then the smallest (best fit:
large free domains stay whole for the jobs that need them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from railyard.topology.model import GpuNode

# counts[level]: distinct domains used at that level (0 nodes, 1 TORs, 2 leaves, 3 spines).
Counts = tuple[int, int, int, int]
Objective = Callable[[Counts], tuple[int, ...]]


@dataclass
class Domain:
    id: str
    level: int
    sort_key: tuple[str, ...]
    cap: int = 0
    children: list[Domain] = field(default_factory=list)
    node: GpuNode | None = None


@dataclass
class Selection:
    counts: Counts
    takes: list[tuple[GpuNode, int]]


def build_tree(slots: Sequence[tuple[GpuNode, int]], top_level: int, scope_id: str = "scope") -> Domain:
    """A tree of the nodes with free slots, from `top_level` down. Levels above it are flattened:
    children of the root are then the domains of `top_level`, ordered so equal ones cluster."""
    root = Domain(scope_id, top_level + 1, ())
    index: dict[tuple[int, str], Domain] = {}
    for node, count in slots:
        if count <= 0:
            continue
        parent = root
        path = (node.spine, node.leaf, node.tor, node.name)
        for level in range(top_level, -1, -1):
            domain_id = node.domain(level)
            key = (level, domain_id)
            child = index.get(key)
            if child is None:
                child = Domain(domain_id, level, path[: 4 - level], node=node if level == 0 else None)
                index[key] = child
                parent.children.append(child)
            child.cap += count
            parent = child
        root.cap += count
    return root


def _add(a: Counts, b: Counts) -> Counts:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])


def _with_self(level: int, counts: Counts, used_children: int) -> Counts:
    """Counts of a subtree whose root level is `level` and which used `used_children` children."""
    bumped = list(counts)
    bumped[level - 1] = used_children
    return (bumped[0], bumped[1], bumped[2], bumped[3])


def select(domain: Domain, need: int, objective: Objective) -> Selection:
    if domain.level == 0:
        assert domain.node is not None
        return Selection((1, 0, 0, 0), [(domain.node, need)])
    kids = sorted(domain.children, key=lambda c: (-c.cap, c.sort_key))
    chosen: list[Selection] = []
    remaining = need
    i = 0
    while remaining > 0:
        fitting = [c for c in kids[i:] if c.cap >= remaining]
        if fitting:
            chosen.append(_best_single(fitting, remaining, objective))
            break
        chosen.append(select(kids[i], kids[i].cap, objective))
        remaining -= kids[i].cap
        i += 1
    total: Counts = (0, 0, 0, 0)
    takes: list[tuple[GpuNode, int]] = []
    for s in chosen:
        total = _add(total, s.counts)
        takes.extend(s.takes)
    return Selection(_with_self(domain.level, total, len(chosen)), takes)


def _best_single(fitting: list[Domain], need: int, objective: Objective) -> Selection:
    if fitting[0].level == 0:
        # Nodes: the fullest node that still fits (best fit), then by name.
        best = min(fitting, key=lambda c: (c.cap, c.sort_key))
        return select(best, need, objective)
    best_key: tuple | None = None
    best: Selection | None = None
    for child in fitting:
        sel = select(child, need, objective)
        key = (objective(sel.counts), child.cap, child.sort_key)
        if best_key is None or key < best_key:
            best_key, best = key, sel
    assert best is not None
    return best


def spine_first(counts: Counts) -> tuple[int, ...]:
    return (counts[3], counts[2], counts[1], counts[0])


def objective_for(preferred_level: int | None) -> Objective:
    """Lexicographic spines, leaves, TORs, nodes; a preferred tier's count goes first."""
    if preferred_level is None or preferred_level == 3:
        return spine_first
    return lambda c: (c[preferred_level], c[3], c[2], c[1], c[0])
