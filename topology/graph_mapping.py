"""Rank mapping as graph mapping: put the job's communication graph (commgraph.py) onto the chosen
slots so that sum(bytes x hop distance) is small.

Hop distance between two replicas is the tier of their lowest common domain: 0 same node or
multi-node NVLink domain, 1 same TOR, 2 same leaf, 3 same spine, 4 across spines. Rails add
nothing on top: local ranks are matched to GPUs so local rank j sits on the same rail in every
replica (ranks.local_rank_order), so a cross-node edge of a rail-aligned placement stays on one
rail.

The mapping is dual recursive bisection along the topology tree (as Scotch does): at each domain
the slots under it are split in two halves of its children (in depth-first order), and the ranks
to be placed there are split into two parts of exactly those sizes by Kernighan-Lin bisection
(kernighan_lin below, on the dense weight matrix) of the communication subgraph, started from the
depth-first / pipeline-chain order;
then each half is mapped the same way. The result is kept only when it is cheaper than that
starting order, so the mapping never does worse than the order Railyard used before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from railyard.topology.api import Parallelism
from railyard.topology.commgraph import Edges, ModelHints, is_ring, replica_graph
from railyard.topology.quality import tier_distance
from railyard.topology.rank_order import Slot, dfs_key, order_replicas


def mapping_cost(edges: Edges, slots_in_rank_order: Sequence[Slot]) -> float:
    """sum over edges of bytes x hop distance, for replica k on slots_in_rank_order[k]."""
    nodes = [s[0] for s in slots_in_rank_order]
    return sum(w * tier_distance(nodes[a], nodes[b]) for (a, b), w in edges.items())


def map_ranks(slots: Sequence[Slot], gpus_per_replica: int, parallelism: Parallelism | None,
              hints: ModelHints | None = None) -> list[Slot]:
    """Slots in rank order."""
    baseline = order_replicas(slots, gpus_per_replica, parallelism)
    if len(slots) <= 2 or is_ring(len(slots), gpus_per_replica, parallelism):
        return baseline
    edges = replica_graph(len(slots), gpus_per_replica, parallelism, hints)
    if not edges:
        return baseline
    # Two starts (the pipeline-chain order and the plain depth-first one): bisection is local search.
    starts = [baseline, sorted(slots, key=dfs_key)] if len(slots) <= _SWAP_LIMIT else [baseline]
    weights = _weights(edges, len(slots))
    candidates = [refine_by_swaps(edges, bisection_mapping(weights, start), weights) for start in starts]
    best = min(candidates, key=lambda m: mapping_cost(edges, m))
    return best if mapping_cost(edges, best) < mapping_cost(edges, baseline) else baseline


_SWAP_LIMIT = 256  # replicas: dense n x n matrices per swap
_MAX_SWAPS = 32


def refine_by_swaps(edges: Edges, mapping: Sequence[Slot], weights: np.ndarray | None = None) -> list[Slot]:
    """Swap the slots of the two ranks whose swap lowers the cost most, while one does (at most
    min(n/2, 32) swaps): bisection sees only the edges inside each half; this repairs what the
    halves cost each other. With M[r, l] = the cost of rank r's edges were it at location l, swapping i and j changes
    the cost by M[i, lj] - M[i, li] + M[j, li] - M[j, lj] + 2 w_ij d(li, lj), for all pairs at once."""
    result = list(mapping)
    n = len(result)
    if n > _SWAP_LIMIT:
        return result
    ids: dict[tuple[str, ...], int] = {}
    loc = np.array([ids.setdefault(_path(slot), len(ids)) for slot in result])
    distance = _distances(list(ids))
    if weights is None:
        weights = _weights(edges, n)
    for _ in range(min(n // 2, _MAX_SWAPS)):
        cost_at = weights @ distance[loc, :]          # M: n x locations
        at_theirs = cost_at[:, loc]                   # M[i, l_j]
        own = np.diag(at_theirs)                      # M[i, l_i]
        delta = at_theirs - own[:, None] + at_theirs.T - own[None, :] + 2 * weights * distance[loc][:, loc]
        i, j = np.unravel_index(np.argmin(delta), delta.shape)
        if delta[i, j] >= -1e-9 * max(1.0, float(np.abs(delta).max())):
            break
        result[i], result[j] = result[j], result[i]
        loc[i], loc[j] = loc[j], loc[i]
    return result


def _distances(paths: list[tuple[str, ...]]) -> np.ndarray:
    """Pairwise level of the lowest common domain of paths of equal length (see _path): 0 same node,
    1 same TOR, ...: the length less the number of leading levels they share."""
    if not paths:
        return np.zeros((0, 0))
    ids: dict[str, int] = {}
    codes = np.array([[ids.setdefault(part, len(ids)) for part in path] for path in paths], dtype=np.int64)
    shared = np.cumprod(codes[:, None, :] == codes[None, :, :], axis=2).sum(axis=2)
    return (codes.shape[1] - shared).astype(float)


def _weights(edges: Edges, ranks: int) -> np.ndarray:
    weights = np.zeros((ranks, ranks))
    for (a, b), w in edges.items():
        weights[a, b] = weights[b, a] = w
    return weights


def bisection_mapping(weights: np.ndarray, start: Sequence[Slot]) -> list[Slot]:
    """Ranks 0..n-1 (indices of the symmetric `weights`) onto the slots of `start` (a mapping in
    rank order), by recursive bisection."""
    slots = sorted(start, key=dfs_key)
    position = {id(slot): i for i, slot in enumerate(slots)}
    # Ranks in the order of their starting slot: KL starts from the starting mapping's split.
    ranks = sorted(range(len(start)), key=lambda r: position[id(start[r])])
    placed: list[Slot | None] = [None] * len(start)
    _bisect(weights, ranks, slots, 0, placed)
    assert all(s is not None for s in placed)
    return [s for s in placed if s is not None]


def _path(slot: Slot) -> tuple[str, ...]:
    """(levels above the spine, spine, leaf, TOR, NVLink domain): nodes of one multi-node NVLink
    domain are one place."""
    node = slot[0]
    return (*node.upper, node.spine, node.leaf, node.tor, node.nvlink_domain or node.name)


def _bisect(weights: np.ndarray, ranks: list[int], slots: list[Slot], depth: int,
            placed: list[Slot | None]) -> None:
    """Map `ranks` (in starting order) onto `slots` (depth-first order, all sharing the first
    `depth` path elements)."""
    # Descend while every slot sits in one child domain: no choice to make there.
    path_depth = len(_path(slots[0])) if slots else 0
    while depth < path_depth and len({_path(s)[depth] for s in slots}) == 1:
        depth += 1
    single_nodes = depth == path_depth - 1 and len({_path(s) for s in slots}) == len(slots)
    if depth == path_depth or len(ranks) <= 1 or single_nodes:
        # One node (distance 0 between them all), or one TOR of one-replica nodes (1 between them all).
        for rank, slot in zip(ranks, slots, strict=True):
            placed[rank] = slot
        return
    children: list[list[Slot]] = []
    for slot in slots:
        if not children or _path(children[-1][0])[depth] != _path(slot)[depth]:
            children.append([])
        children[-1].append(slot)
    # Two halves of the children, as even in slots as whole children allow.
    total, running, cut = len(slots), 0, 1
    for i, child in enumerate(children[:-1]):
        running += len(child)
        cut = i + 1
        if running * 2 >= total:
            break
    left = [s for child in children[:cut] for s in child]
    right = [s for child in children[cut:] for s in child]
    first, second = _split(weights, ranks, len(left))
    _bisect(weights, first, left, depth, placed)
    _bisect(weights, second, right, depth, placed)


def _split(weights: np.ndarray, ranks: list[int], size: int) -> tuple[list[int], list[int]]:
    """`ranks` into parts of `size` and the rest with a small weighted cut, starting from the split
    of the starting order (Kernighan-Lin swaps pairs, so the sizes stay). Each part keeps the
    starting order."""
    if not 0 < size < len(ranks):
        return ranks[:size], ranks[size:]
    sub = weights[np.ix_(ranks, ranks)]
    if not sub.any():
        return ranks[:size], ranks[size:]
    side = kernighan_lin(sub, size)
    return [r for r, s in zip(ranks, side, strict=True) if not s], [r for r, s in zip(ranks, side, strict=True) if s]


_KL_PASSES = 10  # as networkx's kernighan_lin_bisection: a pass rarely gains after a few
_KL_PATIENCE = 12  # swaps tried past a pass's best prefix before the pass ends (Fiduccia-Mattheyses style)


def kernighan_lin(weights: np.ndarray, size: int) -> np.ndarray:
    """Kernighan-Lin bisection of a graph given by its dense symmetric weight matrix, starting from
    vertices [0, size) on side 0 and the rest on side 1. Each pass swaps, one pair at a time, the
    unlocked pair (a, b) of largest gain D[a] + D[b] - 2 w(a, b) (D = external - internal weight),
    locks both, updates D, and keeps the prefix of swaps with the largest total gain; passes repeat
    while one gains. Returns the side (False: the `size` part) of every vertex."""
    n = len(weights)
    side = np.arange(n) >= size
    pair_cost = -2 * weights
    for _ in range(_KL_PASSES):
        gain_d = np.where(side[:, None] == side[None, :], -weights, weights).sum(axis=1)  # D = external - internal
        # Locked (or wrong-side) vertices are masked with -inf: whole-matrix steps, few numpy calls each.
        mask_a = np.where(side, -np.inf, 0.0)
        mask_b = np.where(side, 0.0, -np.inf)
        swaps: list[tuple[int, int]] = []
        total, best_total, best_at = 0.0, 0.0, -1  # the best prefix of this pass's swaps
        for step in range(min(size, n - size)):
            if step - best_at > _KL_PATIENCE:
                break  # so many swaps past the best prefix: the rest of the pass rarely climbs back
            gain = (gain_d + mask_a)[:, None] + (gain_d + mask_b)[None, :] + pair_cost
            a, b = divmod(int(np.argmax(gain)), n)
            swaps.append((a, b))
            total += float(gain[a, b])
            if total > best_total:
                best_total, best_at = total, step
            mask_a[a] = mask_b[b] = -np.inf
            # Moving a to side 1 and b to side 0: side-0 vertices gain 2w(x,a) - 2w(x,b), side-1 the reverse.
            delta = 2 * (weights[:, a] - weights[:, b])
            gain_d += np.where(side, -delta, delta)
        if best_at < 0 or best_total <= 1e-9 * max(1.0, float(np.abs(weights).max())):
            break
        for a, b in swaps[:best_at + 1]:
            side[a], side[b] = True, False
    return side
