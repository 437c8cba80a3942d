"""Choosing domains for a gang: the exact optimum of a top-down objective, by dynamic programming.

The tree (domain_tree.py) is scope -> the levels of the topology (levels.py; by default spines ->
leaves -> TORs, optionally NVLink domains below the TORs) -> nodes, each node carrying how many
replicas (slots) it can host. For every domain and every demand d (0..need) the DP keeps the cheapest way to put
exactly d replicas in it:

- a lowest-level domain's (a TOR's) cost comes from its nodes in closed form: when nodes are
  counted, the fewest nodes (the roomiest first, the remainder on the cheapest node that holds it);
  otherwise the fullest nodes first (best fit, empty nodes stay whole for whole-node jobs);
- every higher domain's and the scope's cost is the min-plus convolution of its children's (numpy),
  plus the domain's own cost when it is used.

A cost is one integer: the counts the objective minimises (domains per level top-down, e.g.
spines, then leaves, TORs, nodes), in mixed radix, most significant first, so integer order is the
objective's lexicographic order; below them best-fit tie-breaks (empty nodes broken, then smaller
domains, then fuller nodes) in the bits that are left. The counts are exact (checked against a MILP
in the benchmark and the tests); the tie-breaks are heuristics, dropped from the bottom when the
radix would overflow int64.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import as_strided
from numpy.typing import NDArray
from railyard.topology.cluster.levels import DEFAULT_LEVELS, Levels
from railyard.topology.cluster.model import GpuNode
from railyard.topology.solver.domain_tree import Counts, Domain, counts_of

Costs = NDArray[np.int64]

_PAD = np.int64(1 << 61)  # an infeasible cost: two of them still sum below int64's limit
_BUDGET = 1 << 60  # cost sums stay below it, so a feasible cost + cost stays below _PAD


@dataclass(frozen=True)
class Objective:
    """Fewest domains at each level, top-down (by default spines, then leaves, TORs, nodes), down
    to `lowest_level`; `depth` is the top level (levels.Levels.depth).

    A preferred tier keeps that tier and those above it tight and leaves the tiers below to best
    fit (as Kueue's preferred topology level); without one every tier is counted, nodes included
    (fewer nodes: more of the gang's traffic on NVLink).
    """

    lowest_level: int = 0
    depth: int = 3

    def __call__(self, counts: Counts) -> tuple[int, ...]:
        return tuple(counts[level] for level in range(self.depth, self.lowest_level - 1, -1))

    def network(self, counts: Counts) -> tuple[int, ...]:
        """The levels above nodes only (those the objective counts)."""
        return tuple(counts[level] for level in range(self.depth, max(self.lowest_level, 1) - 1, -1))


@dataclass
class Selection:
    counts: Counts
    takes: list[tuple[GpuNode, int]]
    broken: int = 0  # empty nodes this selection touches: best fit keeps them whole


@dataclass(frozen=True)
class _Weights:
    """Integer weight of each cost component (0: not counted)."""

    per_level: tuple[int, ...]  # a used domain at level 0..depth
    broken: int   # an empty node used
    rank: int     # a domain's rank by size among its siblings (0 the smallest): best fit
    free: int     # a used node's free GPUs: the fullest nodes first


def _weights(root: Domain, need: int, objective: Objective) -> _Weights:
    domains, siblings, max_free = root.census
    # Most significant first: (name, bound on the component's sum over a placement). Empty nodes
    # broken come right after the network tiers, before the node count (see _TorFill).
    depth = len(domains) - 1
    parts: list[tuple[str, int]] = [(f"level{lv}", min(need, domains[lv])) for lv in range(depth, 0, -1)
                                    if lv >= objective.lowest_level and domains[lv] > 0]
    parts.append(("broken", min(need, domains[0])))
    if objective.lowest_level == 0:
        parts.append(("level0", min(need, domains[0])))
    ties = [("rank", depth * need * (siblings - 1)), ("free", need * max_free)]
    while True:
        weight, weights = 1, {}
        for name, bound in reversed(parts + ties):
            weights[name] = weight
            weight *= bound + 1
        if weight <= _BUDGET or not ties:
            break
        ties.pop()  # the least significant tie-break goes first
    assert weight <= _BUDGET, "domain counts too large for one integer cost"
    return _Weights(tuple(weights.get(f"level{lv}", 0) for lv in range(depth + 1)),
                    weights.get("broken", 0), weights.get("rank", 0), weights.get("free", 0))


@dataclass
class _Solved:
    """A domain's cheapest cost for each demand 0..len-1 and how to split it among its children."""

    costs: Costs
    # Children in convolution order and, per child, the amount it takes for each running demand.
    children: list[tuple[Domain, _Solved]] = field(default_factory=list)
    splits: list[NDArray[np.intp]] = field(default_factory=list)
    node_order: list[Domain] = field(default_factory=list)  # TORs: nodes in fill order
    fill: _TorFill | None = None  # TORs counting nodes


def _min_plus_rows(acc: NDArray[np.int64], child: NDArray[np.int64], need: int) -> tuple[NDArray[np.int64],
                                                                                 NDArray[np.intp]]:
    """Row by row, out[d] = min over k of acc[d - k] + child[k], and the k that achieves it (the
    largest of equal ones); anything at or above _PAD is infeasible and stays _PAD."""
    rows, width = child.shape
    size = min(acc.shape[1] + width - 2, need) + 1
    # Row d of the windows over acc (padded with infeasible costs) holds acc[d - k] for k = width-1 .. 0.
    pad = np.full((rows, width - 1), _PAD, dtype=np.int64)
    padded = np.concatenate((pad, acc, pad), axis=1)
    across, along = padded.strides
    windows = as_strided(padded, shape=(rows, size, width), strides=(across, along, along), writeable=False)
    totals = windows + child[:, None, ::-1]
    best = totals.argmin(axis=2)
    out = np.take_along_axis(totals, best[..., None], axis=2)[..., 0]
    return np.minimum(out, _PAD), width - 1 - best


_Take = tuple[GpuNode, int, bool]  # a node, the replicas it takes, whether it was empty


def _take(node: Domain, count: int) -> _Take:
    assert node.node is not None
    return node.node, count, node.empty


def _node_cost(node: Domain, weights: _Weights) -> int:
    return weights.per_level[0] + weights.broken * node.empty + weights.free * node.free_gpus


def _solve_tor(tor: Domain, need: int, weights: _Weights, own: int) -> _Solved:
    limit = min(tor.cap, need)
    if tor.members:  # interchangeable nodes: d of them cost d times one
        uniform = own + _node_cost(tor, weights) * np.arange(limit + 1, dtype=np.int64)
        uniform[0] = 0
        return _Solved(uniform)
    for node in tor.children:
        node.unit_cost = _node_cost(node, weights)
    costs = [0] * (limit + 1)
    if all(node.cap == 1 for node in tor.children):
        # One slot a node (whole-node replicas): any d nodes are d nodes, so the cheapest d.
        order = sorted(tor.children, key=lambda n: (n.unit_cost, n.sort_key))
        solved = _Solved(np.zeros(1, dtype=np.int64), node_order=order)
        cost = own
        for demand in range(1, limit + 1):
            cost += order[demand - 1].unit_cost
            costs[demand] = cost
    elif weights.per_level[0]:
        # Fewest empty nodes broken, then fewest nodes (see _TorFill).
        fill = _TorFill(tor.children, limit)
        solved = _Solved(np.zeros(1, dtype=np.int64), fill=fill)
        for demand in range(1, limit + 1):
            costs[demand] = own + fill.cost(demand)
    else:
        order = sorted(tor.children, key=lambda n: (n.free_gpus, n.sort_key))
        solved = _Solved(np.zeros(1, dtype=np.int64), node_order=order)
        cap, cost, demand = 0, 0, 1
        for node in order:
            cap += node.cap
            cost += node.unit_cost
            while demand <= min(cap, limit):
                costs[demand] = own + cost
                demand += 1
    solved.costs = np.array(costs, dtype=np.int64)
    return solved


class _Fewest:
    """The fewest of these nodes that hold d replicas: the roomiest whole, the remainder on the
    cheapest node after them that holds it (exact in the count; the choice of holder is best fit)."""

    def __init__(self, nodes: list[Domain], limit: int) -> None:
        self.order = sorted(nodes, key=lambda n: (-n.cap, n.unit_cost, n.sort_key))
        self.caps: list[int] = []
        self.costs: list[int] = []
        cap = cost = 0
        for node in self.order:
            cap += node.cap
            cost += node.unit_cost
            self.caps.append(cap)
            self.costs.append(cost)
        self.total = cap
        # cheapest[r][k]: the index of the cheapest node in order[k:] with at least r slots.
        self.cheapest: list[list[int]] = [[]]
        for remainder in range(1, min(self.order[0].cap if nodes else 0, limit) + 1):
            best = [-1] * (len(self.order) + 1)
            for i in range(len(self.order) - 1, -1, -1):
                j = best[i + 1]
                node = self.order[i]
                if node.cap >= remainder and (j < 0 or node.unit_cost <= self.order[j].unit_cost):
                    j = i
                best[i] = j
            self.cheapest.append(best)

    def _split(self, demand: int) -> tuple[int, int]:
        """(k, full): the first k nodes are taken whole (full slots); the rest goes on one more."""
        k = bisect_left(self.caps, demand)
        return k, self.caps[k - 1] if k else 0

    def cost(self, demand: int) -> int:
        if demand <= 0:
            return 0
        k, full = self._split(demand)
        return (self.costs[k - 1] if k else 0) + self.order[self.cheapest[demand - full][k]].unit_cost

    def takes(self, demand: int, out: list[_Take]) -> None:
        if demand <= 0:
            return
        k, full = self._split(demand)
        out.extend(_take(node, node.cap) for node in self.order[:k])
        out.append(_take(self.order[self.cheapest[demand - full][k]], demand - full))


class _TorFill:
    """Inside a TOR when nodes are counted: first the fewest empty nodes broken (partly used nodes
    hold small gangs before a whole node is broken for them: whole nodes are what big gangs need),
    then the fewest nodes — the empty nodes needed, roomiest first, and the fewest partly used ones."""

    def __init__(self, nodes: list[Domain], limit: int) -> None:
        self.partial = _Fewest([n for n in nodes if not n.empty], limit)
        self.empty = _Fewest([n for n in nodes if n.empty], limit)

    def _broken(self, demand: int) -> tuple[int, int]:
        """(b, rest): b empty nodes taken (roomiest first), `rest` replicas left for partly used ones."""
        if demand <= self.partial.total:
            return 0, demand
        b = bisect_left(self.empty.caps, demand - self.partial.total) + 1
        return b, demand - self.empty.caps[b - 1]

    def cost(self, demand: int) -> int:
        b, rest = self._broken(demand)
        return (self.empty.costs[b - 1] if b else 0) + self.partial.cost(rest)

    def takes(self, demand: int, out: list[_Take]) -> None:
        b, rest = self._broken(demand)
        if rest < 0:  # the empty nodes alone hold it: the last one takes what is left
            out.extend(_take(node, node.cap) for node in self.empty.order[:b - 1])
            out.append(_take(self.empty.order[b - 1], self.empty.order[b - 1].cap + rest))
            return
        out.extend(_take(node, node.cap) for node in self.empty.order[:b])
        self.partial.takes(rest, out)


def _by_size(domain: Domain) -> list[Domain]:
    """Children in the DP's order: smallest first (a child's rank is its place here)."""
    return sorted(domain.children, key=lambda c: (c.cap, c.sort_key))


def _own(domain: Domain, rank: int, weights: _Weights) -> int:
    """What using the domain costs by itself: its level's count, then its rank among its siblings."""
    return weights.per_level[domain.level] + weights.rank * rank if domain.level < len(weights.per_level) else 0


def _solve(domains: list[Domain], ranks: list[int], need: int, weights: _Weights) -> list[_Solved]:
    """Every domain's cheapest cost for each demand 0..need (one level of the tree at a time: the
    children in the same place of every domain's size order are convolved in one numpy call, not one
    call a domain; 12,288 nodes have 384 TORs under 48 leaves)."""
    if domains[0].level == 1:
        return [_solve_tor(tor, need, weights, _own(tor, rank, weights)) for tor, rank in zip(domains, ranks,
                                                                                                strict=True)]
    ordered = [_by_size(domain) for domain in domains]
    flat = [child for children in ordered for child in children]
    # Nodes hang only under level-1 domains (TORs, or a scope of one TOR's level), solved above.
    subs = _solve(flat, [rank for children in ordered for rank in range(len(children))], need, weights)
    child_costs = [sub.costs for sub in subs]
    solved = [_Solved(np.zeros(1, dtype=np.int64)) for _ in domains]
    starts = np.cumsum([0] + [len(children) for children in ordered]).tolist()
    acc = np.zeros((len(domains), 1), dtype=np.int64)
    for place in range(max(len(children) for children in ordered)):
        present = [(row, starts[row] + place) for row, children in enumerate(ordered) if place < len(children)]
        child = np.full((len(domains), max(len(child_costs[i]) for _, i in present)), _PAD, dtype=np.int64)
        child[:, 0] = 0  # a domain with fewer children: its missing child takes nothing
        for row, i in present:
            child[row, :len(child_costs[i])] = child_costs[i]
        acc, split = _min_plus_rows(acc, child, need)
        for row, i in present:
            solved[row].children.append((flat[i], subs[i]))
            solved[row].splits.append(split[row])
    for row, (domain, rank) in enumerate(zip(domains, ranks, strict=True)):
        costs = acc[row].copy()
        costs[1:] = np.minimum(costs[1:] + _own(domain, rank, weights), _PAD)
        solved[row].costs = costs
    return solved


def _solve_exactly(domains: list[Domain], ranks: list[int], need: int, weights: _Weights) -> list[_Solved]:
    """As _solve, but only the cost of exactly `need` is kept (the rest is infeasible). When the
    children's level is counted and one child holds the whole demand, a placement in one child beats
    every placement over several (its count at that level is 1), so only the children that hold it
    are solved, each for `need` alone: on 12,288 nodes a 128-replica gang then skips most of the
    convolutions of the levels above the TORs."""
    fitting: list[list[tuple[Domain, int]]] = []
    for domain in domains:
        counted = domain.level >= 2 and weights.per_level[domain.level - 1]
        by_size = _by_size(domain) if counted else []
        fitting.append([(child, rank) for rank, child in enumerate(by_size) if child.cap >= need])
    whole = [i for i, fits in enumerate(fitting) if not fits]
    out: list[_Solved | None] = [None] * len(domains)
    if whole:
        for i, solved in zip(whole, _solve([domains[i] for i in whole], [ranks[i] for i in whole], need, weights),
                             strict=True):
            out[i] = solved
    inner = [pair for fits in fitting for pair in fits]
    subs = iter(_solve_exactly([c for c, _ in inner], [r for _, r in inner], need, weights) if inner else [])
    for i, fits in enumerate(fitting):
        if not fits:
            continue
        best: tuple[int, Domain, _Solved] | None = None
        for child, _ in fits:
            sub = next(subs)
            cost = int(sub.costs[need])
            if best is None or cost <= best[0]:  # ties to the later child, as _min_plus_rows's argmin
                best = (cost, child, sub)
        assert best is not None
        cost, child, sub = best
        costs = np.full(need + 1, _PAD, dtype=np.int64)
        costs[need] = cost + _own(domains[i], ranks[i], weights)
        split = np.zeros(need + 1, dtype=np.intp)
        split[need] = need
        out[i] = _Solved(costs, children=[(child, sub)], splits=[split])
    return [solved for solved in out if solved is not None]


def _takes(domain: Domain, solved: _Solved, demand: int, out: list[_Take]) -> None:
    if demand <= 0:
        return
    if domain.level == 1:
        if domain.members:
            out.extend((node, 1, domain.empty) for node in domain.members[:demand])
        elif solved.fill is not None:
            solved.fill.takes(demand, out)
        else:
            for node in solved.node_order:
                take = min(node.cap, demand)
                out.append(_take(node, take))
                demand -= take
                if demand <= 0:
                    break
        return
    for (child, sub), split in zip(reversed(solved.children), reversed(solved.splits), strict=True):
        take = int(split[demand])
        if take:
            _takes(child, sub, take, out)
        demand -= take
    assert demand == 0


def select_best(root: Domain, need: int, objective: Objective, levels: Levels = DEFAULT_LEVELS) -> Selection:
    """The placement of `need` replicas in `root` that is optimal for the objective (see the module
    docstring); the root must hold them (root.cap >= need)."""
    weights = _weights(root, need, objective)
    solved = _solve_exactly([root], [0], need, weights)[0]
    chosen: list[_Take] = []
    _takes(root, solved, need, chosen)
    takes = [(node, take) for node, take, _ in chosen]
    return Selection(counts_of(takes, levels), takes, sum(empty for _, _, empty in chosen))


def objective_for(preferred_level: int | None, depth: int = 3) -> Objective:
    """Every tier counted by default; with a preferred tier, that tier and those above it."""
    return Objective(0 if preferred_level is None else preferred_level, depth)
