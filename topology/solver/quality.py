"""Quality figures of a placement: domains spanned, ring cost, rail alignment."""

from __future__ import annotations

from collections.abc import Sequence

from railyard.topology.cluster.levels import Levels
from railyard.topology.cluster.model import GpuNode


def same_nvlink(a: GpuNode, b: GpuNode) -> bool:
    """One node, or two nodes of one multi-node NVLink domain (their GPUs talk over NVLink)."""
    return a.name == b.name or (a.nvlink_domain is not None and a.nvlink_domain == b.nvlink_domain)


def tier_distance(a: GpuNode, b: GpuNode) -> int:
    """0 same node or NVLink domain, 1 same TOR, 2 same leaf, 3 same spine, then one more per
    level above the spine (4 in a fabric of three tiers)."""
    if same_nvlink(a, b):
        return 0
    if a.tor == b.tor:
        return 1
    if a.leaf == b.leaf:
        return 2
    if a.spine == b.spine:
        return 3
    for climbed, (mine, theirs) in enumerate(zip(reversed(a.upper), reversed(b.upper), strict=False)):
        if mine == theirs:
            return 4 + climbed
    return 4 + len(a.upper)


def ring_cost(nodes_in_rank_order: Sequence[GpuNode]) -> int:
    """Sum of tier distances between consecutive ranks, wrapping around."""
    n = len(nodes_in_rank_order)
    if n < 2:
        return 0
    return sum(tier_distance(nodes_in_rank_order[i], nodes_in_rank_order[(i + 1) % n]) for i in range(n))


def domains_spanned(nodes: Sequence[GpuNode]) -> tuple[int, int, int]:
    """(TORs, leaves, spines) touched."""
    return (len({n.tor for n in nodes}), len({n.leaf for n in nodes}), len({n.spine for n in nodes}))


def domains_per_level(nodes: Sequence[GpuNode], levels: Levels) -> tuple[tuple[str, int], ...]:
    """(level name, domains touched) for every level above the node, top to bottom."""
    return tuple((levels.name(level), len({levels.domain_of(n, level) for n in nodes}))
                 for level in range(levels.depth, 0, -1))


def rails_of(node: GpuNode, gpus: Sequence[int]) -> tuple[int, ...]:
    return tuple(node.rails[g] for g in gpus)


def rail_aligned(replicas: Sequence[tuple[GpuNode, Sequence[int]]]) -> bool:
    """True when every cross-node edge of the data-parallel rings joins GPUs on the same rail: local
    rank j of each replica and of the next one in rank order (the last back to the first), wherever the
    two are on different nodes. Same rails on every replica is the plain case; several replicas per node
    in a snake order (rails a then b on one node, b then a on the next) qualify too — the edges inside a
    node (or a multi-node NVLink domain) ride NVLink."""
    if not replicas:
        return False
    for i, (node, gpus) in enumerate(replicas):
        peer, peer_gpus = replicas[(i + 1) % len(replicas)]
        if not same_nvlink(peer, node) and rails_of(node, gpus) != rails_of(peer, peer_gpus):
            return False
    return True
