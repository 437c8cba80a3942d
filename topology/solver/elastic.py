"""Elastic resize of a running gang: which sizes are valid, which replicas a shrink drops, where a
grow puts the new ones. Pure functions of the placement and an immutable snapshot.

- Only data parallelism changes: replicas x GPUs per replica must stay divisible by tensor x pipeline.
- Shrink drops replicas from the least dense domain first (the TOR, then leaf, holding the fewest of
  the job's replicas), so the survivors stay packed; survivors keep node, GPUs and relative order.
- Grow is a delta solve: current ranks keep their nodes; the new ranks are placed like replacements
  (topology/solver/replace.py: one assignment, inside the job's required domain, on its rails) anchored at the
  job's current nodes, so they land as close to the job as its tiers allow.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from railyard.topology.api.job import Parallelism
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.solver.replace import RankSlot, ReplacementDecision, solve_replacement
from railyard.topology.solver.request import GangRequest


def valid_size(replicas: int, gpus_per_replica: int, parallelism: Parallelism | None) -> bool:
    if replicas < 1:
        return False
    if parallelism is None:
        return True
    if parallelism.data is not None:  # a fixed data-parallel degree fixes the size
        return parallelism.tensor * parallelism.pipeline * parallelism.data == replicas * gpus_per_replica
    return (replicas * gpus_per_replica) % (parallelism.tensor * parallelism.pipeline) == 0


def largest_valid(at_most: int, at_least: int, gpus_per_replica: int, parallelism: Parallelism | None) -> int | None:
    """The largest valid size in [at_least, at_most], or None."""
    for n in range(at_most, at_least - 1, -1):
        if valid_size(n, gpus_per_replica, parallelism):
            return n
    return None


def choose_shrink(ranks: Sequence[RankSlot], nodes: Mapping[str, GpuNode], drop: int) -> list[RankSlot]:
    """The slots that stay (in their old rank order) after dropping `drop` of them."""
    kept = list(ranks)
    for _ in range(min(drop, len(kept))):
        tors = Counter(_domain(nodes, s.node, 1) for s in kept)
        leaves = Counter(_domain(nodes, s.node, 2) for s in kept)
        # least dense TOR, then least dense leaf; inside it the highest rank goes first
        victim = min(kept, key=lambda s: (tors[_domain(nodes, s.node, 1)], leaves[_domain(nodes, s.node, 2)],
                                          -s.rank))
        kept.remove(victim)
    return kept


def _domain(nodes: Mapping[str, GpuNode], name: str, level: int) -> str:
    node = nodes.get(name)
    return node.domain(level) if node is not None else f"?{name}"


def solve_growth(snapshot: Snapshot, request: GangRequest, keep: Sequence[RankSlot], extra: int,
                 avoid: frozenset[str] = frozenset()) -> ReplacementDecision:
    """Homes for `extra` new ranks (numbered after the current ones). `snapshot` counts the current
    replicas' GPUs as used. Each new rank is anchored at a current node (in rank order, round robin)."""
    ordered = sorted(keep, key=lambda s: s.rank)
    anchors = [RankSlot(len(ordered) + i, ordered[i % len(ordered)].node, ()) for i in range(extra)] if ordered \
        else []
    return solve_replacement(snapshot, request, ordered, anchors, {}, avoid=avoid)
