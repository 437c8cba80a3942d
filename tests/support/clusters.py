"""Small synthetic clusters for unit tests of the pure core."""

from __future__ import annotations

from typing import Any

from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.cluster.nodes import build_snapshot
from railyard.topology.planner.profile import ClusterProfile, node_objects


def profile_nodes(spines: int = 1, leaves: int = 2, tors: int = 2, nodes: int = 4, gpus: int = 8,
                  **node: Any) -> list[dict[str, Any]]:
    profile = ClusterProfile.model_validate({
        "metadata": {"name": "t"},
        "spec": {"spines": spines, "leavesPerSpine": leaves, "torsPerLeaf": tors, "nodesPerTor": nodes,
                 "node": {"gpus": gpus, **node}},
    })
    return node_objects(profile, kwok=False)


def snapshot(used: dict[str, list[int]] | None = None, **shape: Any) -> Snapshot:
    snap = build_snapshot(profile_nodes(**shape))
    return snap.allocate((k, v) for k, v in (used or {}).items()) if used else snap


def nodes_in_tor(snap: Snapshot, tor: str) -> list[str]:
    return [n.name for n in snap.nodes if n.tor == tor]


def fabric_node(spine: int, leaf: int, tor: int, index: int, gpus: int = 8) -> GpuNode:
    """A bare 8-rail node at a position in the fabric (ids unique across parents)."""
    return GpuNode(name=f"n-{spine}-{leaf}-{tor}-{index}", spine=f"s{spine}", leaf=f"l{spine}-{leaf}",
                   tor=f"t{spine}-{leaf}-{tor}", rails=tuple(range(gpus)), numa=(0,) * gpus, nvlink=(0,) * gpus)
