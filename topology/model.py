"""Immutable values the solver works on: GPU nodes and a snapshot of what is free."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class GpuNode:
    """A node that can run GPU replicas. Per-GPU tuples are indexed by GPU index."""

    name: str
    spine: str
    leaf: str
    tor: str
    rails: tuple[int, ...]
    numa: tuple[int, ...]
    nvlink: tuple[int, ...]
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    taints: tuple[Taint, ...] = ()
    product: str = ""
    nvlink_domain: str | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.rails)

    def domain(self, tier_level: int) -> str:
        """The node's domain id at a tier level (0 node, 1 tor, 2 leaf, 3 spine)."""
        return (self.name, self.tor, self.leaf, self.spine)[tier_level]


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A node the solver will not use, and why (for explanations and the operator's events)."""

    node: str
    reason: str


@dataclass(frozen=True)
class Snapshot:
    """Nodes (sorted by name) and the GPU indices already in use on each.

    Immutable: `allocate` returns a new snapshot, so a plan over many jobs never mutates its input.
    """

    nodes: tuple[GpuNode, ...]
    used: Mapping[str, frozenset[int]] = field(default_factory=dict)
    excluded: tuple[Exclusion, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "used", MappingProxyType(dict(self.used)))
        object.__setattr__(self, "_by_name", {n.name: n for n in self.nodes})
        object.__setattr__(self, "_free", {})

    def node(self, name: str) -> GpuNode:
        return self._by_name[name]  # type: ignore[attr-defined]

    def has_node(self, name: str) -> bool:
        return name in self._by_name  # type: ignore[attr-defined]

    def free(self, node: GpuNode) -> tuple[int, ...]:
        cache: dict[str, tuple[int, ...]] = self._free  # type: ignore[attr-defined]
        free = cache.get(node.name)
        if free is None:
            used = self.used.get(node.name)
            free = tuple(range(node.gpu_count)) if not used else tuple(
                i for i in range(node.gpu_count) if i not in used
            )
            cache[node.name] = free
        return free

    def allocate(self, allocations: Iterable[tuple[str, Iterable[int]]]) -> Snapshot:
        """A new snapshot with these (node, gpu indices) marked used. Double-booking raises."""
        used = {k: set(v) for k, v in self.used.items()}
        for node_name, gpus in allocations:
            taken = used.setdefault(node_name, set())
            gpus = set(gpus)
            clash = taken & gpus
            if clash:
                raise ValueError(f"node {node_name}: GPUs {sorted(clash)} are already allocated")
            taken |= gpus
        return Snapshot(self.nodes, {k: frozenset(v) for k, v in used.items()}, self.excluded)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpu_count for n in self.nodes)

    @property
    def free_gpus(self) -> int:
        return sum(len(self.free(n)) for n in self.nodes)
