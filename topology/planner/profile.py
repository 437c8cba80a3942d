"""Cluster profiles: a compact description of a GPU fabric that expands into Node objects.

The local rig creates these nodes in kwok, the planner and the benchmark read them directly.
Node names are shuffled so they never encode the topology (real clusters' names don't).
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from railyard.topology.cluster.labels import (
    GPU_RESOURCE,
    LABEL_GPU_COUNT,
    LABEL_GPU_NUMA,
    LABEL_GPU_NVLINK,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_RAIL,
    LABEL_HOSTNAME,
    LABEL_LEAF,
    LABEL_SPINE,
    LABEL_TOR,
)

PROFILE_KIND = "ClusterProfile"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# kwok simulates the nodes carrying this label; removing it stops their heartbeat (a lost node).
KWOK_LABEL = ("type", "kwok")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class NodeShape(_Strict):
    gpus: int = Field(8, ge=1, le=64)
    gpu_product: str = Field("NVIDIA-H100-80GB-HBM3", alias="gpuProduct", min_length=1)
    gpu_rail: list[int] | None = Field(None, alias="gpuRail")
    gpu_numa: list[int] | None = Field(None, alias="gpuNuma")
    gpu_nvlink: list[int] | None = Field(None, alias="gpuNvlink")
    cpu: str = "128"
    memory: str = "2Ti"
    pods: int = Field(110, ge=1)

    @model_validator(mode="after")
    def _lengths(self) -> NodeShape:
        for field_name in ("gpu_rail", "gpu_numa", "gpu_nvlink"):
            values = getattr(self, field_name)
            alias = type(self).model_fields[field_name].alias
            if values is not None:
                if len(values) != self.gpus:
                    raise ValueError(f"{alias} has {len(values)} entries but gpus is {self.gpus}")
                if any(v < 0 for v in values):
                    raise ValueError(f"{alias} entries must be >= 0, got {values}")
        return self

    def per_gpu(self) -> tuple[list[int], list[int], list[int]]:
        half = max(1, self.gpus // 2)
        return (
            self.gpu_rail or list(range(self.gpus)),
            self.gpu_numa or [i // half for i in range(self.gpus)],
            self.gpu_nvlink or [0] * self.gpus,
        )


class ProfileSpec(_Strict):
    spines: int = Field(ge=1, le=64)
    leaves_per_spine: int = Field(alias="leavesPerSpine", ge=1, le=256)
    tors_per_leaf: int = Field(alias="torsPerLeaf", ge=1, le=256)
    nodes_per_tor: int = Field(alias="nodesPerTor", ge=1, le=1024)
    node: NodeShape = NodeShape()
    seed: int = 0
    name_prefix: str = Field("gpu", alias="namePrefix", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ProfileMeta(_Strict):
    name: str = Field(min_length=1)


class ClusterProfile(_Strict):
    api_version: str = Field("railyard.dev/v1alpha1", alias="apiVersion")
    kind: str = PROFILE_KIND
    metadata: ProfileMeta
    spec: ProfileSpec

    @model_validator(mode="after")
    def _kind(self) -> ClusterProfile:
        if self.kind != PROFILE_KIND:
            raise ValueError(f"kind is {self.kind!r}, expected {PROFILE_KIND!r}")
        return self

    @property
    def node_count(self) -> int:
        s = self.spec
        return s.spines * s.leaves_per_spine * s.tors_per_leaf * s.nodes_per_tor


def node_objects(profile: ClusterProfile, kwok: bool = True) -> list[dict[str, Any]]:
    """The profile's Node objects (Ready, with labels and allocatable), in name order."""
    s = profile.spec
    rails, numa, nvlink = s.node.per_gpu()
    order = list(range(profile.node_count))
    random.Random(s.seed).shuffle(order)
    width = max(4, len(str(profile.node_count)))
    nodes: list[dict[str, Any]] = []
    index = 0
    for sp in range(s.spines):
        for lf in range(s.leaves_per_spine):
            for tr in range(s.tors_per_leaf):
                for _ in range(s.nodes_per_tor):
                    name = f"{s.name_prefix}-{order[index]:0{width}d}"
                    index += 1
                    labels = {
                        LABEL_HOSTNAME: name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        **(dict([KWOK_LABEL]) if kwok else {}),
                        LABEL_SPINE: f"spine-{sp}",
                        LABEL_LEAF: f"leaf-{sp}-{lf}",
                        LABEL_TOR: f"tor-{sp}-{lf}-{tr}",
                        LABEL_GPU_RAIL: ".".join(map(str, rails)),
                        LABEL_GPU_NUMA: ".".join(map(str, numa)),
                        LABEL_GPU_NVLINK: ".".join(map(str, nvlink)),
                        LABEL_GPU_PRODUCT: s.node.gpu_product,
                        LABEL_GPU_COUNT: str(s.node.gpus),
                    }
                    resources = {
                        "cpu": s.node.cpu, "memory": s.node.memory, "pods": str(s.node.pods),
                        GPU_RESOURCE: str(s.node.gpus),
                    }
                    nodes.append({
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {
                            "name": name,
                            "labels": labels,
                            "annotations": {KWOK_ANNOTATION: "fake"} if kwok else {},
                        },
                        "spec": {},
                        "status": {
                            "allocatable": dict(resources),
                            "capacity": dict(resources),
                            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                        },
                    })
    nodes.sort(key=lambda n: n["metadata"]["name"])
    return nodes
