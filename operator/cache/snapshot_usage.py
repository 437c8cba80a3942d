"""What a snapshot says is in use on each node — GPUs in use, resources requested, and both as the
arrays the solver reads (topology/cluster/node_usage.py) — kept current from the nodes `Usage` reports
touched: a snapshot after a pod change rewrites that pod's node, not every node (on 12,288 nodes
with 50,000 pods, rebuilding them all took 12 ms a snapshot)."""

from __future__ import annotations

from collections.abc import Mapping

from railyard.operator.cache.usage import Usage
from railyard.topology.cluster.model import GpuNode
from railyard.topology.cluster.node_usage import NodeUsage


class SnapshotUsage:
    def __init__(self) -> None:
        self._nodes: tuple[GpuNode, ...] | None = None
        self._where: dict[str, int] = {}
        self._used: dict[str, frozenset[int]] = {}
        self._requested: dict[str, Mapping[str, int]] = {}
        self._arrays: NodeUsage | None = None

    def current(self, nodes: tuple[GpuNode, ...], usage: Usage) -> tuple[
            dict[str, frozenset[int]], dict[str, Mapping[str, int]], NodeUsage]:
        """(used, requested, arrays) of these nodes now. The maps are this object's and change with
        the next call: copy them (Snapshot does). The arrays are never written once returned."""
        touched = usage.take_touched()
        if nodes is not self._nodes or self._arrays is None:  # a new node set: everything again
            self._nodes = nodes
            self._where = {node.name: i for i, node in enumerate(nodes)}
            self._used = {node.name: gpus for node in nodes if (gpus := usage.gpus(node))}
            self._requested = {n.name: dict(on) for n in nodes if (on := usage.requested(n.name))}
            self._arrays = NodeUsage.of(nodes, self._used, self._requested)
        elif touched:
            updates = []
            for name in touched:
                i = self._where.get(name)
                if i is None:
                    continue
                node = nodes[i]
                gpus = usage.gpus(node)
                on = usage.requested(name)
                if gpus:
                    self._used[name] = gpus
                else:
                    self._used.pop(name, None)
                if on:
                    self._requested[name] = dict(on)  # a new dict: earlier snapshots keep theirs
                else:
                    self._requested.pop(name, None)
                updates.append((i, node.gpu_count - len(gpus), on))
            self._arrays = self._arrays.changed(updates)
        return self._used, self._requested, self._arrays
