"""What is held on each node, kept incrementally (as Kueue's addTASUsage/removeTASUsage): every pod
and every recorded-but-not-yet-created rank is a *holder*; adding or removing one touches only its
node, so a placement iteration never re-reads 20,000 pods."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from collections.abc import Set as AbstractSet

from railyard.topology.cluster.model import GpuNode
from railyard.topology.cluster.nodes import PodUsage, gpus_in_use

Holder = Hashable


class Usage:
    def __init__(self) -> None:
        self._holders: dict[Holder, PodUsage] = {}
        self._by_node: dict[str, dict[Holder, PodUsage]] = {}
        self._requested: dict[str, dict[str, int]] = {}
        self._gpus: dict[str, frozenset[int]] = {}  # cache per node; dropped when the node changes
        self.freed = 0  # bumps whenever capacity is released: unschedulable jobs are worth a new try
        self._touched: set[str] = set()  # nodes whose usage may have changed since take_touched()

    def set(self, holder: Holder, usage: PodUsage | None, handover: bool = False) -> None:
        """Record what `holder` holds now (None: nothing). `handover`: what it held is now held by
        another holder (a rank's reservation by its pod), so nothing was freed."""
        old = self._holders.get(holder)
        if old == usage:
            return
        if old is not None:
            del self._holders[holder]
            self._by_node[old.node].pop(holder, None)
            self._add_requests(old.node, old.requests, -1)
            self._gpus.pop(old.node, None)
            self._touched.add(old.node)
            if not handover and (usage is None or usage.node != old.node or usage.gpu_count < old.gpu_count):
                self.freed += 1
        if usage is not None:
            self._holders[holder] = usage
            self._by_node.setdefault(usage.node, {})[holder] = usage
            self._add_requests(usage.node, usage.requests, +1)
            self._gpus.pop(usage.node, None)
            self._touched.add(usage.node)

    def _add_requests(self, node: str, requests: Mapping[str, int], sign: int) -> None:
        if not requests:
            return
        on_node = self._requested.setdefault(node, {})
        for name, amount in requests.items():
            left = on_node.get(name, 0) + sign * amount
            if left:
                on_node[name] = left
            else:
                on_node.pop(name, None)

    def node_changed(self, name: str) -> None:
        self._gpus.pop(name, None)
        self._touched.add(name)

    def take_touched(self) -> AbstractSet[str]:
        """The nodes whose usage may have changed since the last call (and forget them)."""
        touched, self._touched = self._touched, set()
        return touched

    def gpus(self, node: GpuNode) -> frozenset[int]:
        cached = self._gpus.get(node.name)
        if cached is None:
            cached = gpus_in_use(node.gpu_count, (self._by_node.get(node.name) or {}).values())
            self._gpus[node.name] = cached
        return cached

    def gpus_without(self, node: GpuNode, leaving: AbstractSet[Holder]) -> frozenset[int]:
        """The GPUs in use on the node were these holders gone."""
        kept = [u for h, u in (self._by_node.get(node.name) or {}).items() if h not in leaving]
        return gpus_in_use(node.gpu_count, kept)

    def requested(self, node: str) -> Mapping[str, int]:
        return self._requested.get(node) or {}
