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


@dataclass(frozen=True)
class Objective:
    """Lexicographic order of a placement's domain counts.

    Nodes are not counted unless the preferred tier is `node`: below a TOR the job's traffic stays on
    one switch either way, so the node choice is left to best fit (fullest nodes first), which keeps
    empty nodes whole for whole-node jobs.
    """

    preferred_level: int | None = None

    @property
    def pack_nodes(self) -> bool:
        return self.preferred_level == 0

    def __call__(self, counts: Counts) -> tuple[int, ...]:
        network = (counts[3], counts[2], counts[1])
        if self.preferred_level is None or self.preferred_level == 3:
            return network
        return (counts[self.preferred_level], *network)


@dataclass
class Domain:
    id: str
    level: int
    sort_key: tuple[str, ...]
    cap: int = 0
    children: list[Domain] = field(default_factory=list)
    node: GpuNode | None = None
    free_gpus: int = 0  # nodes only: best fit packs the fullest node, keeping empty nodes whole


@dataclass
class Selection:
    counts: Counts
    takes: list[tuple[GpuNode, int]]
    broken: int = 0  # empty nodes this selection touches: best fit keeps them whole


def _on_node(node: Domain, take: int) -> Selection:
    assert node.node is not None
    return Selection((1, 0, 0, 0), [(node.node, take)], int(node.free_gpus == node.node.gpu_count))


def build_tree(slots: Sequence[tuple[GpuNode, int]], top_level: int, scope_id: str = "scope",
               free_gpus: Callable[[GpuNode], int] | None = None) -> Domain:
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
                child = Domain(domain_id, level, path[: 4 - level], node=node if level == 0 else None,
                               free_gpus=free_gpus(node) if free_gpus and level == 0 else 0)
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
        return _on_node(domain, need)
    if domain.level == 1 and not objective.pack_nodes:
        return _finish(domain, _fill_fullest_nodes(domain.children, need))
    by_size = sorted(domain.children, key=lambda c: (-c.cap, c.sort_key))
    if by_size[0].cap >= need:
        return _finish(domain, [_best_single([c for c in by_size if c.cap >= need], need, objective)])
    if domain.level == 1:
        return _finish(domain, _take_nodes(by_size, need))
    # Several children are needed. Largest-first uses the fewest children; taking children whose
    # capacity sits in the fewest sub-domains first can use fewer of those. Keep the better one.
    dense = sorted(by_size, key=lambda c: (-c.cap / _spread(c), -c.cap, c.sort_key))
    options = [_greedy(domain, order, need, objective) for order in (by_size, dense)]
    fewest = min(len(o) for o in options)
    finished = [_finish(domain, o) for o in options if len(o) == fewest]
    return min(finished, key=lambda f: (objective(f.counts), f.broken))


def _node_fit_key(node: Domain) -> tuple:
    return (node.cap, node.free_gpus, node.sort_key)


def _broken_by_fill(tor: Domain, need: int) -> int:
    """How many empty nodes `_fill_fullest_nodes(tor.children, need)` touches."""
    broken, remaining = 0, need
    for node in sorted(tor.children, key=lambda c: (c.free_gpus, c.sort_key)):
        if remaining <= 0:
            break
        remaining -= node.cap
        broken += int(node.node is not None and node.free_gpus == node.node.gpu_count)
    return broken


def _fill_fullest_nodes(nodes: list[Domain], need: int) -> list[Selection]:
    """Best fit inside a TOR: fill the nodes with the fewest free GPUs first."""
    chosen: list[Selection] = []
    remaining = need
    for node in sorted(nodes, key=lambda c: (c.free_gpus, c.sort_key)):
        if remaining <= 0:
            break
        take = min(node.cap, remaining)
        chosen.append(_on_node(node, take))
        remaining -= take
    return chosen


def _take_nodes(by_size: list[Domain], need: int) -> list[Selection]:
    """Nodes of one TOR: the roomiest first, the remainder on the fullest node that holds it."""
    chosen: list[Selection] = []
    remaining = need
    i = 0
    while remaining > 0:
        if by_size[i].cap >= remaining:
            best = min((c for c in by_size[i:] if c.cap >= remaining), key=_node_fit_key)
            chosen.append(_on_node(best, remaining))
            break
        node = by_size[i]
        chosen.append(_on_node(node, node.cap))
        remaining -= node.cap
        i += 1
    return chosen


def _spread(domain: Domain) -> int:
    """Sub-domains a child spreads over (nodes for a TOR): fewer is denser."""
    return max(1, len(domain.children))


def _greedy(domain: Domain, order: list[Domain], need: int, objective: Objective) -> list[Selection]:
    """Take children whole in `order` until the remainder fits in one, then the best single."""
    chosen: list[Selection] = []
    remaining = need
    rest = list(order)
    while remaining > 0:
        if max(c.cap for c in rest) >= remaining:
            chosen.append(_best_single([c for c in rest if c.cap >= remaining], remaining, objective))
            break
        child = rest.pop(0)
        chosen.append(select(child, child.cap, objective))
        remaining -= child.cap
    return chosen


def _finish(domain: Domain, chosen: list[Selection]) -> Selection:
    total: Counts = (0, 0, 0, 0)
    takes: list[tuple[GpuNode, int]] = []
    broken = 0
    for s in chosen:
        total = _add(total, s.counts)
        takes.extend(s.takes)
        broken += s.broken
    return Selection(_with_self(domain.level, total, len(chosen)), takes, broken)


def select_level_by_level(root: Domain, need: int, objective: Objective) -> Selection:
    """The other strategy: at each level, the fewest domains (largest first, best-fit remainder) among
    the children of the domains chosen one level up, so sub-domains compete across parents."""
    allowed = [root]
    while allowed[0].level > 0:
        pool = sorted((c for d in allowed for c in d.children), key=lambda c: (-c.cap, c.sort_key))
        chosen: list[Domain] = []
        remaining = need
        i = 0
        while remaining > 0:
            if pool[i].cap >= remaining:
                # Best fit for the remainder: the smallest domain that holds it.
                fit_key = _node_fit_key if pool[i].level == 0 else (lambda c: (c.cap, c.sort_key))
                chosen.append(min((c for c in pool[i:] if c.cap >= remaining), key=fit_key))
                break
            chosen.append(pool[i])
            remaining -= pool[i].cap
            i += 1
        allowed = chosen
    remaining = need
    order = (lambda c: (-c.cap, c.sort_key)) if objective.pack_nodes else (lambda c: (c.free_gpus, c.sort_key))
    picks: list[Selection] = []
    for leaf in sorted(allowed, key=order):
        take = min(leaf.cap, remaining)
        if take > 0:
            picks.append(_on_node(leaf, take))
        remaining -= take
    takes = [t for p in picks for t in p.takes]
    return Selection(counts_of(takes), takes, sum(p.broken for p in picks))


def counts_of(takes: list[tuple[GpuNode, int]]) -> Counts:
    nodes = [n for n, k in takes if k > 0]
    return (len({n.name for n in nodes}), len({n.tor for n in nodes}), len({n.leaf for n in nodes}),
            len({n.spine for n in nodes}))


def select_best(root: Domain, need: int, objective: Objective) -> Selection:
    """Both strategies; the better placement by the objective wins (hierarchical on ties)."""
    options = [select(root, need, objective), select_level_by_level(root, need, objective)]
    for option in options:
        option.counts = counts_of(option.takes)  # true counts, including tiers above a flattened tree
    return min(options, key=lambda o: (objective(o.counts), o.broken))


def _best_single(fitting: list[Domain], need: int, objective: Objective) -> Selection:
    if fitting[0].level == 0:
        # Nodes: the fullest node that still fits (best fit), then by name.
        return select(min(fitting, key=_node_fit_key), need, objective)
    if fitting[0].level == 1 and not objective.pack_nodes:
        # TORs: every one uses one TOR and the objective ignores nodes, so the key is known without
        # building each TOR's selection (1k fitting TORs on 12k nodes): the empty nodes its fullest-
        # first fill breaks, then best fit.
        return select(min(fitting, key=lambda t: (_broken_by_fill(t, need), t.cap, t.sort_key)), need, objective)
    best_key: tuple | None = None
    best: Selection | None = None
    for child in fitting:
        sel = select(child, need, objective)
        key = (objective(sel.counts), sel.broken, child.cap, child.sort_key)
        if best_key is None or key < best_key:
            best_key, best = key, sel
    assert best is not None
    return best


def objective_for(preferred_level: int | None) -> Objective:
    """Spines, leaves, TORs (fewest first); a preferred tier's count goes first."""
    return Objective(preferred_level)
