"""Per-node replica slots and GPU choice: rail targets, NVLink islands and NUMA locality.

A *rail target* is the sorted tuple of rails every replica's GPUs must cover (rail alignment:
data-parallel peers then talk over the same rail switch). For a node, the number of disjoint
replicas matching a target is exact: min over rails r of free GPUs on r // times r occurs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from itertools import combinations

from railyard.topology.cluster.model import GpuNode

RailTarget = tuple[int, ...]


def free_rail_counts(node: GpuNode, free: Sequence[int]) -> Counter[int]:
    return Counter(node.rails[i] for i in free)


def slots_for_target(rail_counts: Counter[int], target: RailTarget) -> int:
    need = Counter(target)
    return min(rail_counts.get(rail, 0) // times for rail, times in need.items())


@lru_cache(maxsize=16384)
def pattern_slots(pattern: FreePattern, target: RailTarget) -> int:
    """slots_for_target for a node with this free pattern. Memoised: nodes share a few hundred
    patterns, so 2,048 nodes x 16 targets cost a few thousand evaluations, not 30,000."""
    return slots_for_target(Counter(dict(pattern)), target)


def _locality_groups(node: GpuNode, gpus: Sequence[int], size: int) -> list[tuple[int, ...]]:
    """Split GPUs into disjoint groups of `size`, filling NVLink island + NUMA cells first."""
    cells: dict[tuple[int, int], list[int]] = {}
    for i in gpus:
        cells.setdefault((node.nvlink[i], node.numa[i]), []).append(i)
    groups: list[tuple[int, ...]] = []
    rest: list[int] = []
    for key in sorted(cells):
        members = cells[key]
        while len(members) >= size:
            groups.append(tuple(members[:size]))
            members = members[size:]
        rest.extend(members)
    # What no single cell could hold: group by island, then anything, in index order.
    rest.sort(key=lambda i: (node.nvlink[i], node.numa[i], i))
    while len(rest) >= size:
        groups.append(tuple(rest[:size]))
        rest = rest[size:]
    return groups


@lru_cache(maxsize=4096)
def natural_targets(
    rails: tuple[int, ...], numa: tuple[int, ...], nvlink: tuple[int, ...], size: int
) -> tuple[RailTarget, ...]:
    """Rail targets of the locality-packed groups of an empty node of this shape."""
    shape = GpuNode("shape", "", "", "", rails, numa, nvlink)
    groups = _locality_groups(shape, range(len(rails)), size)
    return tuple(dict.fromkeys(tuple(sorted(rails[i] for i in g)) for g in groups))


FreePattern = tuple[tuple[int, int], ...]  # sorted (rail, free GPUs on it) of one node


def free_pattern(node: GpuNode, free: tuple[int, ...]) -> FreePattern:
    return _pattern(node.rails, free)


@lru_cache(maxsize=16384)
def _pattern(rails: tuple[int, ...], free: tuple[int, ...]) -> FreePattern:
    return tuple(sorted(Counter(rails[i] for i in free).items()))


def capacity_targets(patterns: Counter[FreePattern], size: int, limit: int,
                     max_enumerated_gpus: int = 16) -> list[RailTarget]:
    """The rail targets offering the most replica slots over these free-rail patterns (pattern -> how
    many nodes have it), found by trying every size-`size` sub-multiset of every pattern. Targets from
    empty-node groupings alone miss alignments that partly used nodes still allow; this finds the
    target with the most slots exactly (nodes of more than `max_enumerated_gpus` free GPUs are left
    to the natural targets, to keep the enumeration small)."""
    totals: dict[RailTarget, int] = {}
    for pattern in patterns:
        rails = tuple(rail for rail, count in pattern for _ in range(count))
        if len(rails) > max_enumerated_gpus:
            continue
        for target in set(combinations(rails, size)):
            if target in totals:
                continue
            need = Counter(target)
            totals[target] = sum(nodes * min(dict(p).get(rail, 0) // times for rail, times in need.items())
                                 for p, nodes in patterns.items())
    ranked = sorted(((t, n) for t, n in totals.items() if n > 0), key=lambda kv: (-kv[1], kv[0]))
    return [t for t, _ in ranked[:limit]]


def _closeness(node: GpuNode, anchor: int, gpu: int) -> tuple[int, int, int]:
    return (node.nvlink[gpu] != node.nvlink[anchor], node.numa[gpu] != node.numa[anchor], gpu)


def pick_gpus(
    node: GpuNode, free: Sequence[int], count: int, size: int, target: RailTarget | None
) -> list[tuple[int, ...]]:
    """Choose `count` disjoint groups of `size` free GPUs on one node.

    With a rail target every group covers exactly those rails; otherwise groups are packed by
    locality. Each group keeps its GPUs close: same NVLink island, then same NUMA node.
    """
    if size == 0:
        return [()] * count
    whole = count == 1 and len(free) == size
    if target is not None and whole and sorted(node.rails[g] for g in free) == sorted(target):
        return [tuple(sorted(free))]  # the only group there is (a whole-node replica): nothing to choose
    if target is None:
        # cells in order: NVLink island + NUMA cells are filled one at a time
        return _locality_groups(node, free, size)[:count]
    available = sorted(free)
    groups: list[tuple[int, ...]] = []
    need = Counter(target)
    for _ in range(count):
        on_rail: dict[int, list[int]] = {}
        for i in available:
            on_rail.setdefault(node.rails[i], []).append(i)
        # Anchor on the scarcest rail so the group forms around what is hardest to find.
        anchor_rail = min(need, key=lambda r: (len(on_rail.get(r, ())), r))
        anchor = on_rail[anchor_rail][0]
        chosen: list[int] = []
        for rail in sorted(need):
            candidates = sorted(on_rail.get(rail, ()), key=lambda g: _closeness(node, anchor, g))
            chosen.extend(candidates[: need[rail]])
        if len(chosen) != size:
            raise AssertionError(f"node {node.name}: target {target} not available in {available}")
        groups.append(tuple(sorted(chosen)))
        taken = set(chosen)
        available = [i for i in available if i not in taken]
    return groups
