"""Exact tier placement as a MILP (scipy.optimize.milp): fewest spines, then leaves, then TORs, then
(optionally) nodes — the objective the solver's DP optimises, solved independently to check it."""

from __future__ import annotations

import numpy as np
from railyard.topology.model import GpuNode
from scipy.optimize import Bounds, LinearConstraint, milp

# Lexicographic for up to 9,999 domains a tier.
NODE, TOR, LEAF, SPINE = 1, 10_000, 10_000**2, 10_000**3


def weighted(tors: int, leaves: int, spines: int, nodes: int = 0) -> int:
    return nodes * NODE + tors * TOR + leaves * LEAF + spines * SPINE


def optimum(slots: list[tuple[GpuNode, int]], need: int, lowest_level: int = 0,
            empty: frozenset[str] = frozenset()) -> int | None:
    """The minimum weighted domain count holding `need` replicas, or None if infeasible. Tiers below
    `lowest_level` (0 nodes, 1 TORs, 2 leaves, 3 spines) are not counted. As in the solver, the
    `empty` nodes used (whole nodes broken) are minimised after the counted tiers, before nodes;
    they are not part of the returned total.

    Variables: x_n replicas on node n (0..cap), and one binary per node, TOR, leaf and spine used;
    x_n <= cap_n * u_n, u_n <= y_tor, y_tor <= z_leaf, z_leaf <= w_spine, sum x = need."""
    slots = [(n, c) for n, c in slots if c > 0]
    if sum(c for _, c in slots) < need:
        return None
    nodes = [n for n, _ in slots]
    groups = [sorted({n.tor for n in nodes}), sorted({n.leaf for n in nodes}), sorted({n.spine for n in nodes})]
    count = len(nodes)
    offset = [2 * count]
    for group in groups[:-1]:
        offset.append(offset[-1] + len(group))
    index = [{d: offset[i] + j for j, d in enumerate(group)} for i, group in enumerate(groups)]
    size = offset[-1] + len(groups[-1])
    # Lexicographic by sequence (spines, then leaves ... each fixed at its optimum before the next):
    # one MILP with weights 1e12 : 1 is numerically unsafe (HiGHS answered 1 node off).
    broken = [count + i for i, n in enumerate(nodes) if n.name in empty]
    columns = [range(offset[i], offset[i] + len(groups[i])) for i in range(3)]
    network = [(SPINE, columns[2]), (LEAF, columns[1]), (TOR, columns[0])][: min(3, 4 - lowest_level)]
    tiers = [*network, (0, broken)] + ([(NODE, range(count, 2 * count))] if lowest_level == 0 else [])
    rows: list[np.ndarray] = []
    upper: list[float] = []

    def at_most(pairs: list[tuple[int, float]], bound: float = 0) -> None:
        row = np.zeros(size)
        for column, coefficient in pairs:
            row[column] += coefficient
        rows.append(row)
        upper.append(bound)

    for i, (node, cap) in enumerate(slots):
        at_most([(i, 1), (count + i, -cap)])
        at_most([(count + i, 1), (index[0][node.tor], -1)])
    for node in nodes:
        at_most([(index[0][node.tor], 1), (index[1][node.leaf], -1)])
        at_most([(index[1][node.leaf], 1), (index[2][node.spine], -1)])
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
        result = milp(cost, constraints=LinearConstraint(np.array(rows), lower, upper),
                      integrality=np.ones(size), bounds=Bounds(np.zeros(size), ub), options={"mip_rel_gap": 0})
        if not result.success:
            return None
        best = round(result.fun)
        total += best * weight
        rows.append(cost)  # keep this tier at its optimum for the next
        lower.append(best)
        upper.append(best)
    return total
