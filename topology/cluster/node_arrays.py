"""What the solver asks of every node of a node set, as arrays in snapshot order: built once per node
set and kept in the snapshot's node memo (the operator keeps that memo while its nodes stay), so a
solve reads a few arrays instead of visiting thousands of node objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from railyard.topology.cluster.model import Snapshot


@dataclass(frozen=True)
class NodeArrays:
    where: Mapping[str, int]  # node name -> index in the snapshot
    gpu_count: NDArray[np.int64]
    gpu_counts: frozenset[int]  # the distinct GPU counts of the node set
    rail_code: NDArray[np.int64]  # the node's rail set, as an index into rail_sets
    rail_sets: tuple[tuple[int, ...], ...]
    name_rank: NDArray[np.int64]  # the node's place in name order
    # The node's TOR as a code; None where domain_tree must sort nodes one by one (NVLink domains below
    # the TORs, or nodes of another depth than the levels: that loop raises for those).
    tor: NDArray[np.int64] | None
    nvlink_domains: bool  # any node in a multi-node NVLink domain


def node_arrays(snapshot: Snapshot) -> NodeArrays:
    key = ("node arrays",)
    cached = snapshot.memo.get(key)
    if cached is None:
        cached = snapshot.memo[key] = _build(snapshot)
    return cached  # type: ignore[return-value]


def _build(snapshot: Snapshot) -> NodeArrays:
    nodes, levels = snapshot.nodes, snapshot.levels
    rails: dict[tuple[int, ...], int] = {}
    rail_code = np.array([rails.setdefault(n.rail_set, len(rails)) for n in nodes], dtype=np.int64)
    rank = np.empty(len(nodes), dtype=np.int64)
    rank[np.argsort(np.array([n.name for n in nodes], dtype=object), kind="stable")] = np.arange(len(nodes))
    tor: NDArray[np.int64] | None = None
    depth = len(levels.network)
    if not levels.nvlink and all(len(n.network_path) == depth for n in nodes):
        tors: dict[str, int] = {}
        tor = np.array([tors.setdefault(n.tor, len(tors)) for n in nodes], dtype=np.int64)
    gpu_count = np.array([n.gpu_count for n in nodes], dtype=np.int64)
    return NodeArrays(snapshot.positions(), gpu_count, frozenset(gpu_count.tolist()), rail_code, tuple(rails), rank,
                      tor, any(n.nvlink_domain for n in nodes))
