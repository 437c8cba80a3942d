"""What is in use on every node of a snapshot, as arrays in snapshot order: free GPUs and the
resources pods request there.

The solver reads both for every node of every solve; on 12,288 nodes reading them from the
snapshot's per-node maps was a third of a solve. So a snapshot carries them as arrays: the operator's
cache keeps them current as pods come and go (operator/cache/state.py), `Snapshot.allocate` and
`release` copy them and rewrite only the nodes they touch, and a snapshot given none derives them
once from its maps (`NodeUsage.of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:  # model.py imports this module
    from railyard.topology.cluster.model import GpuNode


def busy_count(gpu_count: int, used: frozenset[int]) -> int:
    """GPUs of the node in use (indices outside it are not the node's: Snapshot.free ignores them)."""
    return sum(1 for g in used if 0 <= g < gpu_count)


@dataclass(frozen=True)
class NodeUsage:
    """Per node, in snapshot order: free GPUs, and per resource the amount requested (milli-units).
    Treat as immutable: snapshots derived from one share the arrays they do not change."""

    free: NDArray[np.int64]
    requested: Mapping[str, NDArray[np.int64]]

    @classmethod
    def of(cls, nodes: Sequence[GpuNode], used: Mapping[str, frozenset[int]],
           requested: Mapping[str, Mapping[str, int]]) -> NodeUsage:
        """Derived from a snapshot's maps: node name -> GPUs in use, and -> resources requested."""
        where = {node.name: i for i, node in enumerate(nodes)}
        free = np.array([node.gpu_count for node in nodes], dtype=np.int64)
        busy = [(i, busy_count(nodes[i].gpu_count, gpus)) for name, gpus in used.items()
                if gpus and (i := where.get(name)) is not None]
        if busy:
            at, count = np.array(busy, dtype=np.int64).T
            free[at] -= count
        pairs = [(where[name], on_node) for name, on_node in requested.items() if name in where]
        at = np.array([i for i, _ in pairs], dtype=np.intp)
        names = sorted({resource for _, on_node in pairs for resource in on_node})
        amounts: dict[str, NDArray[np.int64]] = {}
        for resource in names:  # one array a resource: comprehensions, not a loop a node
            column = np.zeros(len(nodes), dtype=np.int64)
            column[at] = np.array([on_node.get(resource, 0) for _, on_node in pairs], dtype=np.int64)
            amounts[resource] = column
        return cls(free, amounts)

    def requested_of(self, resources: Sequence[str]) -> NDArray[np.int64]:
        """A resources x nodes matrix of what is requested (0 where nothing is)."""
        count = len(self.free)
        return np.array([self.requested.get(name, np.zeros(count, dtype=np.int64)) for name in resources],
                        dtype=np.int64).reshape(len(resources), count)

    def changed(self, updates: Iterable[tuple[int, int, Mapping[str, int]]]) -> NodeUsage:
        """A copy with these nodes rewritten: (index, free GPUs, everything requested there). The arrays
        are copied whole: a few resources of a few thousand nodes cost microseconds."""
        rows = list(updates)
        if not rows:
            return self
        free = self.free.copy()
        amounts = {name: column.copy() for name, column in self.requested.items()}
        for index, gpus, on_node in rows:
            free[index] = gpus
            for name in amounts.keys() | on_node.keys():
                column = amounts.get(name)
                if column is None:
                    column = amounts[name] = np.zeros(len(free), dtype=np.int64)
                column[index] = on_node.get(name, 0)
        return NodeUsage(free, amounts)
