"""Exact domain selection as a MILP (scipy.optimize.milp): fewest domains at each level, top-down
(spines, then leaves, then TORs by default), then (optionally) nodes — the objective the solver's DP
optimises, solved independently to check it."""

from __future__ import annotations

import numpy as np
from railyard.topology.cluster.levels import DEFAULT_LEVELS, Levels
from railyard.topology.cluster.model import GpuNode
from scipy.optimize import Bounds, LinearConstraint, milp

# Lexicographic for up to 9,999 domains a level: a domain at level L weighs BASE**L (a node 1).
BASE = 10_000


def weighted(tors: int, leaves: int, spines: int, nodes: int = 0) -> int:
    return counts_weight((nodes, tors, leaves, spines))


def counts_weight(counts: tuple[int, ...], lowest_level: int = 0) -> int:
    """Domain counts (bottom-up, nodes first) as one number; levels below `lowest_level` count 0."""
    return sum(c * BASE**level for level, c in enumerate(counts) if level >= lowest_level)


def optimum(slots: list[tuple[GpuNode, int]], need: int, lowest_level: int = 0,
            empty: frozenset[str] = frozenset(), levels: Levels = DEFAULT_LEVELS) -> int | None:
    """The minimum weighted domain count (counts_weight) holding `need` replicas, or None if
    infeasible. Levels below `lowest_level` (0 nodes, 1 the lowest level above them ...) are not
    counted. As in the solver, the `empty` nodes used (whole nodes broken) are minimised after the
    counted levels above nodes, before nodes; they are not part of the returned total.

    Variables: x_n replicas on node n (0..cap), and one binary per node and per domain of every
    level used; x_n <= cap_n * u_n, u_n <= y(its lowest domain), y(domain) <= y(parent), sum x = need.
    A domain is its path from the top, as in the solver's tree."""
    slots = [(n, c) for n, c in slots if c > 0]
    if sum(c for _, c in slots) < need:
        return None
    nodes = [n for n, _ in slots]
    depth = levels.depth
    paths = [levels.path(n) for n in nodes]
    # groups[k]: the domains of level k + 1 (bottom-up), each a path prefix.
    groups = [sorted({p[: depth - k] for p in paths}) for k in range(depth)]
    count = len(nodes)
    offset = [2 * count]
    for group in groups[:-1]:
        offset.append(offset[-1] + len(group))
    index = [{d: offset[i] + j for j, d in enumerate(group)} for i, group in enumerate(groups)]
    size = offset[-1] + len(groups[-1])
    # Lexicographic by sequence (the top level, then the next ... each fixed at its optimum before the
    # next): one MILP with weights 1e12 : 1 is numerically unsafe (HiGHS answered 1 node off).
    broken = [count + i for i, n in enumerate(nodes) if n.name in empty]
    network = [(BASE ** (k + 1), range(offset[k], offset[k] + len(groups[k])))
               for k in reversed(range(depth)) if k + 1 >= lowest_level]
    tiers = [*network, (0, broken)] + ([(1, range(count, 2 * count))] if lowest_level == 0 else [])
    rows: list[np.ndarray] = []
    upper: list[float] = []

    def at_most(pairs: list[tuple[int, float]], bound: float = 0) -> None:
        row = np.zeros(size)
        for column, coefficient in pairs:
            row[column] += coefficient
        rows.append(row)
        upper.append(bound)

    for i, (_, cap) in enumerate(slots):
        at_most([(i, 1), (count + i, -cap)])
        at_most([(count + i, 1), (index[0][paths[i]], -1)])
    for path in paths:
        for k in range(depth - 1):
            at_most([(index[k][path[: depth - k]], 1), (index[k + 1][path[: depth - k - 1]], -1)])
    demand = np.zeros(size)
    demand[:count] = 1
    lower = [-np.inf] * len(rows) + [need]
    rows.append(demand)
    upper.append(need)
    ub = np.ones(size)
    ub[:count] = [c for _, c in slots]
    total = 0
    for weight, used in tiers:
        cost = np.zeros(size)
        cost[list(used)] = 1
        best = _minimum(cost, LinearConstraint(np.array(rows), lower, upper), Bounds(np.zeros(size), ub))
        total += best * weight
        # Keep this tier at its optimum for the next, as "at most best + 1/2" (the counts are integers):
        # an equality row pinned at the optimum sometimes left HiGHS reporting no solution at all.
        rows.append(cost)
        lower.append(-np.inf)
        upper.append(best + 0.5)
    return total


def _minimum(cost: np.ndarray, constraints: LinearConstraint, bounds: Bounds) -> int:
    """The integer optimum of a MILP known to be feasible (capacity was checked first): HiGHS again
    without presolve when it reports no success, and an error rather than a wrong None."""
    integrality = np.ones(len(cost))
    result = None
    for options in ({"mip_rel_gap": 0}, {"mip_rel_gap": 0, "presolve": False}):
        result = milp(cost, constraints=constraints, integrality=integrality, bounds=bounds, options=options)
        if result.success:
            return round(result.fun)
    raise RuntimeError(f"the MILP oracle failed on a feasible problem: {result.message if result else ''}")
