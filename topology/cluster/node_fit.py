"""How many replicas each node's non-GPU resources (cpu, memory, pods, RDMA NICs ...) leave room
for, over every node of a snapshot at once.

The same count as resources.replicas_that_fit, node by node, in numpy: allocatable is a function of
the nodes alone and is kept in the snapshot's node memo; what pods request comes from the snapshot's
arrays (node_usage.py).
On 12,288 nodes the per-node loop was most of a solve that carried a template's requests (every
operator solve does: a pod always requests its `pods` slot).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from railyard.topology.cluster.model import Snapshot

UNLIMITED = 1 << 30  # a node whose resources are not modelled, or a request of no resource: no bound


@dataclass(frozen=True)
class NodeFit:
    """Per node, in snapshot order: replicas that fit, and the resource that binds first (an index
    into `resources`, meaningful where the fit is below UNLIMITED)."""

    resources: tuple[str, ...]
    fit: NDArray[np.int64]
    binding: NDArray[np.intp]


def node_fit(snapshot: Snapshot, need: Mapping[str, int], skip: frozenset[str]) -> NodeFit:
    """Replicas needing `need` that fit next to what is requested on each node (see module doc)."""
    resources = tuple(name for name, amount in need.items() if name not in skip and amount > 0)
    count = len(snapshot.nodes)
    if not resources:
        return NodeFit(resources, np.full(count, UNLIMITED, dtype=np.int64), np.zeros(count, dtype=np.intp))
    allocatable, modelled = _allocatable(snapshot, resources)
    free = np.maximum(allocatable - snapshot.node_usage().requested_of(resources), 0)
    per_resource = free // np.array([need[name] for name in resources], dtype=np.int64)[:, None]
    binding = per_resource.argmin(axis=0)  # the first of equal fits, as replicas_that_fit
    fit = np.where(modelled, per_resource.min(axis=0), UNLIMITED)
    return NodeFit(resources, fit, binding)


def _allocatable(snapshot: Snapshot, resources: tuple[str, ...]) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    key = ("allocatable", resources)
    cached = snapshot.memo.get(key)
    if cached is None:
        matrix = np.zeros((len(resources), len(snapshot.nodes)), dtype=np.int64)
        modelled = np.zeros(len(snapshot.nodes), dtype=np.bool_)
        for i, node in enumerate(snapshot.nodes):
            if node.allocatable:
                modelled[i] = True
                for r, name in enumerate(resources):
                    matrix[r, i] = node.allocatable.get(name, 0)
        cached = snapshot.memo[key] = (matrix, modelled)
    return cached  # type: ignore[return-value]

