"""The topology's levels: the domains above a node, named, top to bottom.

The default is the native three network tiers, spine -> leaf -> TOR. A cluster may define more
(e.g. zone -> block -> spine -> leaf -> tor, from its own node labels; see labels.parse_levels) and
an NVLink-domain level between the TOR and the node (`nvidia.com/gpu.clique`: a GB200 NVL72 rack),
where nodes without the label are one-node domains. `requiredTier` and `preferredTier` name a level.

Levels are numbered bottom-up: the node is 0, the lowest level above it 1, the top `depth`. The
lowest three network levels keep the roles the rest of the solver knows them by (TOR: the first
switch, where rails meet; leaf; spine); levels above them only add domains to count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from railyard.topology.cluster.model import GpuNode

NODE = "node"
NVLINK = "nvlink"
DEFAULT_NAMES = ("spine", "leaf", "tor")
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$")


class LevelError(ValueError):
    """A level name that this topology does not have, or a definition that cannot be used."""


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise LevelError(f"level name {name!r}: expected a lowercase name such as 'zone' or 'rack' "
                         "(letters, digits and '-', at most 32 characters)")
    return name


@dataclass(frozen=True)
class Levels:
    """Network level names top to bottom (at least the three roles spine, leaf, TOR, in that
    order at the bottom), and whether the NVLink-domain level sits below them."""

    network: tuple[str, ...] = DEFAULT_NAMES
    nvlink: bool = False

    def __post_init__(self) -> None:
        if len(self.network) < 3:
            raise LevelError(f"levels {list(self.network)}: the model needs three network levels (spine, leaf, "
                             "TOR roles); a definition with fewer collapses the missing top ones")
        names = [*self.network, *((NVLINK,) if self.nvlink else ())]
        for name in names:
            check_name(name)
        repeated = sorted({n for n in names if names.count(n) > 1} | ({NODE} & set(names)))
        if repeated:
            raise LevelError(f"levels {names}: names must be unique and not 'node' (got {repeated[0]!r} twice "
                             "or as a level)")

    @property
    def top_down(self) -> tuple[str, ...]:
        """Every level above the node, top to bottom."""
        return (*self.network, NVLINK) if self.nvlink else self.network

    @property
    def depth(self) -> int:
        return len(self.top_down)

    def names_bottom_up(self) -> tuple[str, ...]:
        return (NODE, *reversed(self.top_down))

    def index(self, name: str) -> int:
        """The level number of a name (node 0); LevelError naming the levels there are."""
        names = self.names_bottom_up()
        if name not in names:
            raise LevelError(f"{name!r} is not a level of this cluster's topology (levels, top to bottom: "
                             f"{', '.join(reversed(names))})")
        return names.index(name)

    def name(self, level: int) -> str:
        return self.names_bottom_up()[level]

    def path(self, node: GpuNode) -> tuple[str, ...]:
        """The node's domain ids, top to bottom, one per level above it."""
        network = node.network_path
        if len(network) != len(self.network):
            raise LevelError(f"node {node.name}: {len(network)} network levels, the topology has "
                             f"{len(self.network)} ({', '.join(self.network)})")
        if self.nvlink:
            return (*network, node.nvlink_domain or node.name)
        return network

    def domain_of(self, node: GpuNode, level: int) -> str:
        """The id of the node's domain at a level (0: the node itself). NVLink-domain ids are
        qualified by their TOR: a domain the network splits counts once per part."""
        if level == 0:
            return node.name
        path = self.path(node)
        if self.nvlink and level == 1:
            return f"{node.tor}/{path[-1]}"
        return path[-level]

    def check_tiers(self, required: str | None, preferred: str | None) -> None:
        """LevelError naming the field, when a job's requiredTier/preferredTier is not a level here
        or the preference is above the requirement."""
        for field, name in (("requiredTier", required), ("preferredTier", preferred)):
            if name is not None:
                try:
                    self.index(name)
                except LevelError as e:
                    raise LevelError(f"spec.topology.{field}: {e}") from None
        if required is not None and preferred is not None and self.index(preferred) > self.index(required):
            raise LevelError(f"spec.topology.preferredTier {preferred!r} is above requiredTier {required!r}; "
                             "a preference must be at or below the requirement")


DEFAULT_LEVELS = Levels()
