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

import math
from collections.abc import Sequence

import numpy as np
from railyard.topology.api.job import Parallelism
from railyard.topology.solver.commgraph import Edges, ModelHints, is_ring, replica_weights
from railyard.topology.solver.quality import tier_distance
from railyard.topology.solver.rank_order import Slot, dfs_key, order_replicas


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
    weights = replica_weights(len(slots), gpus_per_replica, parallelism, hints)
    if not weights.any():
        return baseline
    # Bisection is local search: from small gangs' two starts (the pipeline-chain order and the
    # plain depth-first one) the better; past _TWO_STARTS_LIMIT replicas the depth-first start
    # alone (it won 39 of 48 fragmented 64- and 128-replica cases, within 0.4 % on the mean); past
    # _SWAP_LIMIT the chain order alone, as before.
    if len(slots) <= _TWO_STARTS_LIMIT:
        starts = [baseline, sorted(slots, key=dfs_key)]
    else:
        starts = [sorted(slots, key=dfs_key)] if len(slots) <= _SWAP_LIMIT else [baseline]
    places = _Places(slots)
    candidates = [refine_by_swaps({}, bisection_mapping(weights, start, places), weights, places) for start in starts]
    costs = [places.cost(weights, mapping) for mapping in candidates]
    best = min(range(len(candidates)), key=costs.__getitem__)
    return candidates[best] if costs[best] < places.cost(weights, baseline) else baseline


class _Places:
    """The distinct places (_path) of a gang's slots and their pairwise distances, computed once
    for every mapping of those slots that is costed or refined."""

    def __init__(self, slots: Sequence[Slot]) -> None:
        ids: dict[tuple[str, ...], int] = {}
        self.path_of = {id(slot): _path(slot) for slot in slots}
        self._of = {key: ids.setdefault(path, len(ids)) for key, path in self.path_of.items()}
        self.distance = _distances(list(ids))

    def locations(self, mapping: Sequence[Slot]) -> np.ndarray:
        """The place of each rank's slot (mappings hold the very slot objects they were made of)."""
        return np.array([self._of[id(slot)] for slot in mapping])

    def cost(self, weights: np.ndarray, mapping: Sequence[Slot]) -> float:
        """mapping_cost, from the weight matrix."""
        loc = self.locations(mapping)
        return float((weights * _block(self.distance, loc, loc)).sum() / 2)


_SWAP_LIMIT = 256  # replicas: dense n x n matrices per swap
_TWO_STARTS_LIMIT = 32
_MAX_SWAPS = 32


def refine_by_swaps(edges: Edges, mapping: Sequence[Slot], weights: np.ndarray | None = None,
                    places: _Places | None = None) -> list[Slot]:
    """Swap the slots of the two ranks whose swap lowers the cost most, while one does (at most
    min(n/2, 32) swaps): bisection sees only the edges inside each half; this repairs what the
    halves cost each other. With M[r, l] = the cost of rank r's edges were it at location l, swapping i and j changes
    the cost by M[i, lj] - M[i, li] + M[j, li] - M[j, lj] + 2 w_ij d(li, lj), for all pairs at once.
    `weights` (the matrix of `edges`) and `places` (of these slots) spare building them again."""
    result = list(mapping)
    n = len(result)
    if n > _SWAP_LIMIT:
        return result
    places = places or _Places(result)
    loc = places.locations(result)
    distance = places.distance
    if weights is None:
        weights = _weights(edges, n)
    cost_at = weights @ distance[loc, :]  # M: n x locations, kept up to date by rank-one steps
    between = _block(distance, loc, loc)  # d(l_i, l_j)
    for _ in range(min(n // 2, _MAX_SWAPS)):
        at_theirs = cost_at[:, loc]                   # M[i, l_j]
        own = np.diag(at_theirs)                      # M[i, l_i]
        delta = at_theirs - own[:, None] + at_theirs.T - own[None, :] + 2 * weights * between
        i, j = np.unravel_index(np.argmin(delta), delta.shape)
        if delta[i, j] >= -1e-9 * max(1.0, float(np.abs(delta).max())):
            break
        result[i], result[j] = result[j], result[i]
        # Rank i moves from l_i to l_j and j the other way: M changes by (w_.i - w_.j) x (d(l_j) - d(l_i)).
        cost_at += np.outer(weights[:, i] - weights[:, j], distance[loc[j]] - distance[loc[i]])
        loc[i], loc[j] = loc[j], loc[i]
        between[[i, j]] = between[[j, i]]
        between[:, [i, j]] = between[:, [j, i]]
    return result


def _block(matrix: np.ndarray, rows: Sequence[int] | np.ndarray, columns: Sequence[int] | np.ndarray) -> np.ndarray:
    """matrix[np.ix_(rows, columns)] without np.ix_'s own cost (a third of the indexing time on the
    small blocks recursive bisection asks for: hundreds a solve)."""
    return matrix[rows][:, columns]


def _distances(paths: list[tuple[str, ...]]) -> np.ndarray:
    """Pairwise level of the lowest common domain of paths of equal length (see _path): 0 same node,
    1 same TOR, ...: the length less the number of leading levels they share."""
    if not paths:
        return np.zeros((0, 0))
    # Each level's code names the whole prefix, so two paths share a level exactly when they share
    # every level above it: the shared levels are a sum of per-level equalities.
    ids: dict[tuple[str, ...], int] = {}
    depth = len(paths[0])
    codes = np.array([[ids.setdefault(path[:k + 1], len(ids)) for k in range(depth)] for path in paths],
                     dtype=np.int64)
    shared = sum((codes[:, k, None] == codes[None, :, k]).astype(np.int64) for k in range(depth))
    return (depth - shared).astype(float)


def _weights(edges: Edges, ranks: int) -> np.ndarray:
    weights = np.zeros((ranks, ranks))
    for (a, b), w in edges.items():
        weights[a, b] = weights[b, a] = w
    return weights


def bisection_mapping(weights: np.ndarray, start: Sequence[Slot], places: _Places | None = None) -> list[Slot]:
    """Ranks 0..n-1 (indices of the symmetric `weights`) onto the slots of `start` (a mapping in
    rank order), by recursive bisection. `places` (of these slots) spares their paths."""
    places = places or _Places(start)
    slots = sorted(start, key=dfs_key)
    position = {id(slot): i for i, slot in enumerate(slots)}
    # Ranks in the order of their starting slot: KL starts from the starting mapping's split.
    ranks = sorted(range(len(start)), key=lambda r: position[id(start[r])])
    placed: list[Slot | None] = [None] * len(start)
    # Each slot's path as integer codes, one column per level: a domain's slots are runs of equal
    # codes in depth-first order, so the recursion works on index ranges of `slots`.
    ids: dict[str, int] = {}
    paths = [places.path_of[id(slot)] for slot in slots]
    codes = np.array([[ids.setdefault(part, len(ids)) for part in path] for path in paths], dtype=np.int64)
    place = places.locations(slots)
    _bisect(weights, ranks, slots, codes, place, 0, len(slots), 0, placed)
    assert all(s is not None for s in placed)
    return [s for s in placed if s is not None]


def _path(slot: Slot) -> tuple[str, ...]:
    """(levels above the spine, spine, leaf, TOR, NVLink domain): nodes of one multi-node NVLink
    domain are one place."""
    node = slot[0]
    return (*node.upper, node.spine, node.leaf, node.tor, node.nvlink_domain or node.name)


def _bisect(weights: np.ndarray, ranks: list[int], slots: list[Slot], codes: np.ndarray, place: np.ndarray,
            lo: int, hi: int, depth: int, placed: list[Slot | None]) -> None:
    """Map `ranks` (in starting order) onto slots[lo:hi] (depth-first order, all sharing the first
    `depth` path elements; `codes` their paths, `place` their last-level domain)."""
    path_depth = codes.shape[1]
    # Descend while every slot sits in one child domain: no choice to make there.
    while depth < path_depth and bool((codes[lo:hi, depth] == codes[lo, depth]).all()):
        depth += 1
    single_places = depth == path_depth - 1 and len(np.unique(place[lo:hi])) == hi - lo
    if depth == path_depth or len(ranks) <= 1 or single_places:
        # One node (distance 0 between them all), or one TOR of one-replica places (1 between them all).
        for rank, slot in zip(ranks, slots[lo:hi], strict=True):
            placed[rank] = slot
        return
    # Children are runs of equal codes; cut after the first run that reaches half the slots (as
    # even in slots as whole children allow), or before the last child.
    column = codes[lo:hi, depth]
    starts = np.flatnonzero(column[1:] != column[:-1]) + 1  # where each child after the first begins
    half = np.flatnonzero(starts * 2 >= hi - lo)
    cut = lo + int(starts[half[0]] if len(half) else starts[-1])
    first, second = _split(weights, ranks, cut - lo)
    _bisect(weights, first, slots, codes, place, lo, cut, depth, placed)
    _bisect(weights, second, slots, codes, place, cut, hi, depth, placed)


def _split(weights: np.ndarray, ranks: list[int], size: int) -> tuple[list[int], list[int]]:
    """`ranks` into parts of `size` and the rest with a small weighted cut, starting from the split
    of the starting order (Kernighan-Lin swaps pairs, so the sizes stay). Each part keeps the
    starting order."""
    if not 0 < size < len(ranks):
        return ranks[:size], ranks[size:]
    sub = _block(weights, ranks, ranks)
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
    tiny = 1e-9 * max(1.0, float(np.abs(weights).max()))
    for _ in range(_KL_PASSES):
        left, right = np.flatnonzero(~side), np.flatnonzero(side)
        # The pass works on the side-0 x side-1 block and the two diagonal blocks (twice the
        # weights: what a swap adds to D): a quarter of the matrix per step, few numpy calls.
        rows_left, rows_right = weights[left], weights[right]
        cross2 = 2 * rows_left[:, right]
        left2, right2 = 2 * rows_left[:, left], 2 * rows_right[:, right]
        gain_left = (cross2.sum(axis=1) - left2.sum(axis=1)) / 2  # D = external - internal
        gain_right = (cross2.sum(axis=0) - right2.sum(axis=1)) / 2
        pass_ = _kl_pass_in_python if len(left) * len(right) <= _KL_PYTHON_CELLS else _kl_pass
        swaps, best_total, best_at = pass_(gain_left, gain_right, cross2, left2, right2)
        if best_at < 0 or best_total <= tiny:
            break
        for i, j in swaps[:best_at + 1]:
            side[left[i]], side[right[j]] = True, False
    return side


_KL_PYTHON_CELLS = 256  # side-0 x side-1 pairs up to which a pass runs faster in plain Python

_Pass = tuple[list[tuple[int, int]], float, int]  # the swaps, the best prefix's total gain, its last step


def _kl_pass(gain_left: np.ndarray, gain_right: np.ndarray, cross2: np.ndarray, left2: np.ndarray,
             right2: np.ndarray) -> _Pass:
    """One Kernighan-Lin pass: swap the best unlocked pair, lock it, update the gains; until
    _KL_PATIENCE swaps past the best prefix or no pair is left. `gain_*` are updated in place."""
    swaps: list[tuple[int, int]] = []
    total, best_total, best_at = 0.0, 0.0, -1  # the best prefix of this pass's swaps
    width = len(gain_right)
    for step in range(min(len(gain_left), width)):
        if step - best_at > _KL_PATIENCE:
            break  # so many swaps past the best prefix: the rest of the pass rarely climbs back
        gain = np.add.outer(gain_left, gain_right)
        gain -= cross2
        i, j = divmod(int(gain.argmax()), width)
        swaps.append((i, j))
        total += float(gain[i, j])
        if total > best_total:
            best_total, best_at = total, step
        # Moving a (left i) to side 1 and b (right j) to side 0: side-0 vertices gain 2w(x,a) - 2w(x,b),
        # side-1 the reverse; locked vertices sit at -inf and stay there.
        gain_left += left2[:, i] - cross2[:, j]
        gain_right += right2[:, j] - cross2[i, :]
        gain_left[i] = gain_right[j] = -np.inf
    return swaps, best_total, best_at


def _kl_pass_in_python(gain_left: np.ndarray, gain_right: np.ndarray, cross2: np.ndarray, left2: np.ndarray,
                       right2: np.ndarray) -> _Pass:
    """_kl_pass on lists: on the small parts most bisection steps split, a numpy call costs more than
    the arithmetic. The same operations in the same order on the same doubles, and the first best
    pair in row-major order as argmax picks it, so the swaps are _kl_pass's exactly."""
    gl, gr = gain_left.tolist(), gain_right.tolist()
    c2, l2, r2 = cross2.tolist(), left2.tolist(), right2.tolist()
    free_left, free_right = list(range(len(gl))), list(range(len(gr)))
    swaps: list[tuple[int, int]] = []
    total, best_total, best_at = 0.0, 0.0, -1
    for step in range(min(len(gl), len(gr))):
        if step - best_at > _KL_PATIENCE:
            break
        best, i, j = -math.inf, -1, -1
        for a in free_left:
            gain_a, row = gl[a], c2[a]
            for b in free_right:
                gain = gain_a + gr[b] - row[b]
                if gain > best:
                    best, i, j = gain, a, b
        swaps.append((i, j))
        total += best
        if total > best_total:
            best_total, best_at = total, step
        free_left.remove(i)
        free_right.remove(j)
        for a in free_left:
            gl[a] += l2[a][i] - c2[a][j]
        row_i = c2[i]
        for b in free_right:
            gr[b] += r2[b][j] - row_i[b]
    return swaps, best_total, best_at
