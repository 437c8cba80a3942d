"""Exact tier placement as a MILP (scipy.optimize.milp): fewest spines, then leaves, then TORs."""

from __future__ import annotations

import numpy as np
from railyard.topology.model import GpuNode
from scipy.optimize import Bounds, LinearConstraint, milp

WEIGHTS = (1, 1_000, 1_000_000)  # TOR, leaf, spine: lexicographic for up to 999 domains a tier


def weighted(tors: int, leaves: int, spines: int) -> int:
    return tors * WEIGHTS[0] + leaves * WEIGHTS[1] + spines * WEIGHTS[2]


def optimum(slots: list[tuple[GpuNode, int]], need: int) -> int | None:
    """The minimum weighted domain count holding `need` replicas, or None if infeasible."""
    slots = [(n, c) for n, c in slots if c > 0]
    if sum(c for _, c in slots) < need:
        return None
    tors = sorted({n.tor for n, _ in slots})
    leaves = sorted({n.leaf for n, _ in slots})
    spines = sorted({n.spine for n, _ in slots})
    n_nodes = len(slots)
    t_index = {t: n_nodes + i for i, t in enumerate(tors)}
    l_index = {lf: n_nodes + len(tors) + i for i, lf in enumerate(leaves)}
    s_index = {s: n_nodes + len(tors) + len(leaves) + i for i, s in enumerate(spines)}
    size = n_nodes + len(tors) + len(leaves) + len(spines)
    cost = np.zeros(size)
    cost[n_nodes : n_nodes + len(tors)] = WEIGHTS[0]
    cost[n_nodes + len(tors) : n_nodes + len(tors) + len(leaves)] = WEIGHTS[1]
    cost[n_nodes + len(tors) + len(leaves) :] = WEIGHTS[2]
    rows: list[np.ndarray] = []
    lower: list[float] = []
    upper: list[float] = []
    demand = np.zeros(size)
    demand[:n_nodes] = 1
    rows.append(demand)
    lower.append(need)
    upper.append(need)
    parent_tor = {n.tor: n for n, _ in slots}
    for i, (node, cap) in enumerate(slots):  # x_n <= cap * y_tor
        row = np.zeros(size)
        row[i], row[t_index[node.tor]] = 1, -cap
        rows.append(row)
        lower.append(-np.inf)
        upper.append(0)
    for tor, node in parent_tor.items():  # y_tor <= z_leaf
        row = np.zeros(size)
        row[t_index[tor]], row[l_index[node.leaf]] = 1, -1
        rows.append(row)
        lower.append(-np.inf)
        upper.append(0)
    for leaf in leaves:  # z_leaf <= w_spine
        node = next(n for n, _ in slots if n.leaf == leaf)
        row = np.zeros(size)
        row[l_index[leaf]], row[s_index[node.spine]] = 1, -1
        rows.append(row)
        lower.append(-np.inf)
        upper.append(0)
    ub = np.ones(size)
    ub[:n_nodes] = [c for _, c in slots]
    result = milp(cost, constraints=LinearConstraint(np.array(rows), lower, upper),
                  integrality=np.ones(size), bounds=Bounds(np.zeros(size), ub), options={"mip_rel_gap": 0})
    if not result.success:
        return None
    return round(result.fun)
