"""Immutable values the solver works on: GPU nodes and a snapshot of what is free."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from types import MappingProxyType

from railyard.topology.cluster.levels import DEFAULT_LEVELS, Levels
from railyard.topology.cluster.node_usage import NodeUsage, busy_count


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
    # status.allocatable in milli-units (every resource, GPUs included); empty means "not modelled".
    allocatable: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)
    upper: tuple[str, ...] = ()  # domain ids of the levels above the spine, top to bottom (levels.py)
    # Derived, stored once: the solver reads them for every node of every candidate. Set in
    # __post_init__, the one place a field of this frozen class is written: read as properties or
    # cached_property instead, a 128 x 8 solve on 12,288 nodes took 1.4-2x as long (measured).
    gpu_count: int = field(init=False, compare=False, hash=False, repr=False)
    rail_set: tuple[int, ...] = field(init=False, compare=False, hash=False, repr=False)  # sorted rails
    network_path: tuple[str, ...] = field(init=False, compare=False, hash=False, repr=False)  # top to TOR

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_count", len(self.rails))
        object.__setattr__(self, "rail_set", tuple(sorted(self.rails)))
        object.__setattr__(self, "network_path", (*self.upper, self.spine, self.leaf, self.tor))

    def domain(self, tier_level: int) -> str:
        """The node's domain id in a network role (0 node, 1 tor, 2 leaf, 3 spine); levels.Levels.domain_of
        knows every level of the cluster's topology."""
        return (self.name, self.tor, self.leaf, self.spine)[tier_level]


@cache
def all_gpus(count: int) -> tuple[int, ...]:
    return tuple(range(count))


@lru_cache(maxsize=4096)
def _free_of(count: int, used: frozenset[int]) -> tuple[int, ...]:
    """Free GPU indices; nodes share few distinct used sets, so 12k nodes cost a few hundred."""
    return tuple(i for i in range(count) if i not in used)


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A node the solver will not use, and why (for explanations and the operator's events)."""

    node: str
    reason: str


class Snapshot:
    """Nodes (sorted by name), the GPU indices in use on each and the resources requested there.

    Immutable by interface: no setters, and `allocate` returns a new snapshot, so a plan over many
    jobs never mutates its input. (A plain class rather than a frozen dataclass: it keeps derived
    lookup tables that a frozen dataclass could only set through object.__setattr__.)
    """

    __slots__ = ("_by_name", "_free", "_usage", "excluded", "levels", "memo", "nodes", "requested", "scratch",
                 "used")

    def __init__(self, nodes: tuple[GpuNode, ...], used: Mapping[str, frozenset[int]] | None = None,
                 excluded: tuple[Exclusion, ...] = (),
                 requested: Mapping[str, Mapping[str, int]] | None = None, levels: Levels = DEFAULT_LEVELS,
                 memo: dict[object, object] | None = None, usage: NodeUsage | None = None) -> None:
        """`usage`: `used` and `requested` as arrays in node order (node_usage.py), when the caller keeps
        them; else they are derived on first use."""
        self.nodes = tuple(nodes)
        self.levels = levels
        self.used: Mapping[str, frozenset[int]] = MappingProxyType(dict(used or {}))
        self.excluded = tuple(excluded)
        self.requested: Mapping[str, Mapping[str, int]] = MappingProxyType(dict(requested or {}))
        self._by_name = {n.name: n for n in self.nodes}
        self._free: dict[str, tuple[int, ...]] = {}
        # Results of pure functions of the nodes alone (e.g. template eligibility), shared by the
        # snapshots `allocate` derives and by any snapshot given it (`memo`) over the same nodes.
        self.memo: dict[object, object] = {} if memo is None else memo
        # Results of pure functions of this snapshot (its nodes and what is in use), for the solves
        # of one pass that share it.
        self.scratch: dict[object, object] = {}
        self._usage = usage

    def __repr__(self) -> str:
        return f"Snapshot({len(self.nodes)} nodes, {self.free_gpus} free GPUs, {len(self.excluded)} excluded)"

    def emptied(self) -> Snapshot:
        """The same nodes with nothing in use: can a gang ever fit this cluster?"""
        empty = Snapshot(self.nodes, None, self.excluded, None, self.levels)
        empty.memo = self.memo  # node-only results hold for it too
        return empty

    def node(self, name: str) -> GpuNode:
        return self._by_name[name]

    def has_node(self, name: str) -> bool:
        return name in self._by_name

    def free(self, node: GpuNode) -> tuple[int, ...]:
        free = self._free.get(node.name)
        if free is None:
            used = self.used.get(node.name)
            free = all_gpus(node.gpu_count) if not used else _free_of(node.gpu_count, used)
            self._free[node.name] = free
        return free

    def replica_slots(self, gpus: int, off: frozenset[str] = frozenset()) -> int:
        """At most how many `gpus`-GPU replicas the free GPUs could hold, every rule ignored (tiers,
        rails, selectors, other resources), leaving out the nodes named in `off`: a gang asking more
        cannot fit this snapshot without them. Kept per snapshot: every waiting job of a pass asks alike."""
        if gpus <= 0:
            return sys.maxsize
        key = ("replica slots", gpus, off)
        slots = self.scratch.get(key)
        if not isinstance(slots, int):
            free = self.node_usage().free
            if off:
                where = self.positions()
                slots = self.replica_slots(gpus) - int((free[[where[n] for n in off if n in where]] // gpus).sum())
            else:
                slots = int((free // gpus).sum())
            self.scratch[key] = slots
        return slots

    def node_usage(self) -> NodeUsage:
        """Free GPUs and requested resources of every node, as arrays in node order."""
        if self._usage is None:
            self._usage = NodeUsage.of(self.nodes, self.used, self.requested)
        return self._usage

    def positions(self) -> Mapping[str, int]:
        """Node name -> its index in `nodes` (node memo)."""
        cached = self.memo.get(("positions",))
        if cached is None:
            cached = self.memo[("positions",)] = {node.name: i for i, node in enumerate(self.nodes)}
        return cached  # type: ignore[return-value]

    def _usage_after(self, touched: set[str], used: Mapping[str, frozenset[int]],
                     requested: Mapping[str, Mapping[str, int]]) -> NodeUsage | None:
        """This snapshot's arrays with the touched nodes rewritten, when it has arrays at all."""
        if self._usage is None:
            return None
        where = self.positions()
        by_name = self._by_name
        return self._usage.changed((where[name], by_name[name].gpu_count - busy_count(by_name[name].gpu_count,
                                                                                    used.get(name, frozenset())),
                                    requested.get(name) or {}) for name in touched if name in where)

    def requested_on(self, node: str) -> Mapping[str, int]:
        return self.requested.get(node) or {}

    def allocate(self, allocations: Iterable[tuple[str, Iterable[int]]],
                 requests: Mapping[str, int] | None = None) -> Snapshot:
        """A new snapshot with these (node, gpu indices) marked used and, per allocation, `requests`
        added to the node's requested resources. Double-booking raises. Only the nodes allocated on
        are copied: a pass placing many gangs derives a snapshot for each."""
        used = dict(self.used)
        requested = dict(self.requested)
        touched: set[str] = set()
        for node_name, gpus in allocations:
            taken = used.get(node_name, frozenset())
            gpus = frozenset(gpus)
            clash = taken & gpus
            if clash:
                raise ValueError(f"node {node_name}: GPUs {sorted(clash)} are already allocated")
            used[node_name] = taken | gpus
            if requests:
                on_node = dict(requested.get(node_name) or {})
                for name, amount in requests.items():
                    on_node[name] = on_node.get(name, 0) + amount
                requested[node_name] = on_node
            touched.add(node_name)
        return Snapshot(self.nodes, used, self.excluded, requested, self.levels, self.memo,
                        self._usage_after(touched, used, requested))

    def release(self, allocations: Iterable[tuple[str, Iterable[int]]],
                requests: Mapping[str, int] | None = None) -> Snapshot:
        """The inverse of `allocate`: these GPUs free again and, per allocation, `requests` given back
        (what a gang leaving would leave behind)."""
        used = dict(self.used)
        requested = dict(self.requested)
        touched: set[str] = set()
        for node_name, gpus in allocations:
            left = used.get(node_name, frozenset()) - frozenset(gpus)
            if left:
                used[node_name] = left
            else:
                used.pop(node_name, None)
            if requests and node_name in requested:
                on_node = dict(requested[node_name])
                for name, amount in requests.items():
                    on_node[name] = max(0, on_node.get(name, 0) - amount)
                requested[node_name] = on_node
            touched.add(node_name)
        return Snapshot(self.nodes, used, self.excluded, requested, self.levels, self.memo,
                        self._usage_after(touched, used, requested))

    def only_nodes(self, names: frozenset[str]) -> Snapshot:
        """The snapshot restricted to these nodes (a domain)."""
        return Snapshot(tuple(n for n in self.nodes if n.name in names), self.used, self.excluded,
                        self.requested, self.levels)

    def without_nodes(self, names: frozenset[str]) -> Snapshot:
        if not names:
            return self
        return Snapshot(tuple(n for n in self.nodes if n.name not in names), self.used, self.excluded,
                        self.requested, self.levels)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpu_count for n in self.nodes)

    @property
    def free_gpus(self) -> int:
        return int(self.node_usage().free.sum())
