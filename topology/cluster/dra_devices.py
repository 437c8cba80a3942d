"""Devices as Dynamic Resource Allocation publishes them: which GPU and rail NIC of which node each
ResourceSlice device is, and which of them ResourceClaims hold. Pure: plain objects in, frozen
values out.

Vocabulary (what NVIDIA's GPU driver and a NIC driver such as DraNet publish; the names are the
defaults of `DeviceNames`):
- a GPU is a device of driver `gpu.nvidia.com` with the attributes `index` (int), `uuid` (string) and
  the standard `resource.kubernetes.io/pcieRoot`; `productName`, `resource.kubernetes.io/numaNode` and
  `nvlinkIsland` are published by the rig too but Railyard reads its topology from node labels;
- a rail NIC is a device of driver `dra.net` with `rdma: true`, the same pcieRoot as the GPU it serves
  and `rdmaDevice`, the HCA name NCCL is given (the device name when absent).
A GPU's rail NIC is the NIC under its PCIe root: that is what a claim's `matchAttribute` enforces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"


@dataclass(frozen=True)
class DeviceNames:
    """The drivers and DeviceClasses Railyard's claims name (operator settings RAILYARD_DRA_*)."""

    gpu_driver: str = "gpu.nvidia.com"
    gpu_class: str = "gpu.nvidia.com"
    nic_driver: str = "dra.net"
    nic_class: str = "rdma.dra.net"
    hca_attribute: str = "rdmaDevice"


STANDARD = DeviceNames()

DeviceKey = tuple[str, str, str]  # (driver, pool, device): how an allocation result names a device


@dataclass(frozen=True, slots=True)
class Gpu:
    key: DeviceKey
    index: int
    uuid: str
    pcie_root: str


@dataclass(frozen=True, slots=True)
class Nic:
    key: DeviceKey
    pcie_root: str
    hca: str


@dataclass(frozen=True)
class NodeDevices:
    """One node's published GPUs (by index) and rail NICs (by PCIe root)."""

    gpus: Mapping[int, Gpu] = field(default_factory=dict)
    nics: Mapping[str, Nic] = field(default_factory=dict)

    def keys(self) -> set[DeviceKey]:
        return {*(g.key for g in self.gpus.values()), *(n.key for n in self.nics.values())}

    def nic_for(self, gpu: int) -> Nic | None:
        """The rail NIC under GPU `gpu`'s PCIe root."""
        g = self.gpus.get(gpu)
        return self.nics.get(g.pcie_root) if g is not None else None


def _attribute(device: Mapping[str, Any], name: str) -> Any:
    raw = (device.get("attributes") or {}).get(name) or {}
    for kind in ("int", "string", "bool", "version"):
        if kind in raw:
            return raw[kind]
    return None


@dataclass(frozen=True)
class SliceDevices:
    """What one ResourceSlice publishes for Railyard: its node and its GPUs and NICs (others skipped)."""

    node: str
    gpus: tuple[Gpu, ...] = ()
    nics: tuple[Nic, ...] = ()


def read_slice(body: Mapping[str, Any], names: DeviceNames = STANDARD) -> SliceDevices | None:
    """The GPUs and rail NICs a slice publishes; None for a slice of another driver or of no node.
    A GPU without an integer `index` and a `uuid`, or a device without a pcieRoot, cannot be pinned
    or aligned: it is left out (the node then looks short of devices and is excluded, saying so)."""
    spec = body.get("spec") or {}
    driver, node = spec.get("driver"), spec.get("nodeName")
    if not node or driver not in (names.gpu_driver, names.nic_driver):
        return None
    pool = str((spec.get("pool") or {}).get("name") or "")
    gpus: list[Gpu] = []
    nics: list[Nic] = []
    for device in spec.get("devices") or []:
        name = str(device.get("name") or "")
        root = _attribute(device, PCIE_ROOT)
        if not name or not isinstance(root, str):
            continue
        key = (driver, pool, name)
        if driver == names.gpu_driver:
            index, uuid = _attribute(device, "index"), _attribute(device, "uuid")
            if isinstance(index, int) and not isinstance(index, bool) and isinstance(uuid, str) and uuid:
                gpus.append(Gpu(key, index, uuid, root))
        elif _attribute(device, "rdma") is True:
            hca = _attribute(device, names.hca_attribute)
            nics.append(Nic(key, root, hca if isinstance(hca, str) and hca else name))
    return SliceDevices(str(node), tuple(gpus), tuple(nics))


def merge(slices: Iterable[SliceDevices]) -> dict[str, NodeDevices]:
    """Per node, the devices all its slices publish (a driver may split a node over several)."""
    gpus: dict[str, dict[int, Gpu]] = {}
    nics: dict[str, dict[str, Nic]] = {}
    for s in slices:
        gpus.setdefault(s.node, {}).update({g.index: g for g in s.gpus})
        nics.setdefault(s.node, {}).update({n.pcie_root: n for n in s.nics})
    return {node: NodeDevices(gpus.get(node, {}), nics.get(node, {})) for node in gpus.keys() | nics.keys()}


def inventory(slice_objects: Iterable[Mapping[str, Any]], names: DeviceNames = STANDARD) -> dict[str, NodeDevices]:
    return merge(s for body in slice_objects if (s := read_slice(body, names)) is not None)


def device_index(nodes: Mapping[str, NodeDevices]) -> dict[DeviceKey, tuple[str, int | None]]:
    """Device -> (node, GPU index; None for a NIC)."""
    out: dict[DeviceKey, tuple[str, int | None]] = {}
    for node, devices in nodes.items():
        out.update({g.key: (node, g.index) for g in devices.gpus.values()})
        out.update({n.key: (node, None) for n in devices.nics.values()})
    return out


def allocated(claim: Mapping[str, Any]) -> tuple[DeviceKey, ...]:
    """The devices a claim's allocation holds (empty while it is not allocated)."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return tuple((str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
                 for r in results)


def unpinnable(gpu_count: int, devices: NodeDevices | None) -> str | None:
    """Why a node whose GPUs DRA publishes cannot take pinned replicas (None: it can): every GPU index
    the labels model needs a published GPU, and each of those a rail NIC under its PCIe root."""
    if devices is None or not devices.gpus:
        return None
    missing = [i for i in range(gpu_count) if i not in devices.gpus]
    if missing:
        return (f"ResourceSlices publish {len(devices.gpus)} GPUs but the node has {gpu_count}: no GPU with "
                f"index {missing[0]}")
    without = [i for i in range(gpu_count) if devices.nic_for(i) is None]
    if without:
        return (f"GPU {without[0]} ({devices.gpus[without[0]].pcie_root}) has no rail NIC published under its "
                f"PCIe root")
    return None


def held_gpus(nodes: Mapping[str, NodeDevices],
              claims: Iterable[Iterable[DeviceKey]]) -> dict[str, frozenset[int]]:
    """GPU indices held on each node by allocated claims (anyone's)."""
    where = device_index(nodes)
    out: dict[str, set[int]] = {}
    for devices in claims:
        for key in devices:
            node, index = where.get(key, ("", None))
            if index is not None:
                out.setdefault(node, set()).add(index)
    return {k: frozenset(v) for k, v in out.items()}


def rail_order(gpus: Iterable[int], rails: tuple[int, ...]) -> list[int]:
    """A replica's GPUs in rail order: local rank i drives the i-th (so local rank i of every replica
    is on the same rail, which is what keeps a DP ring's hops on one rail)."""
    return sorted(gpus, key=lambda g: (rails[g] if 0 <= g < len(rails) else g, g))
