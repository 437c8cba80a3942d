"""The devices DRA publishes and the claims that hold them, kept incrementally for the operator's
state: per node the GPUs and rail NICs ResourceSlices publish (topology/cluster/dra_devices.py reads them), per
ResourceClaim the devices its allocation holds, and who holds each device (so a claim that cannot be
allocated is explained by name)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from railyard.operator.base.objects import Key, resource_version
from railyard.topology.cluster.dra_devices import (
    DeviceKey,
    DeviceNames,
    NodeDevices,
    SliceDevices,
    allocated,
    device_index,
    merge,
    read_slice,
    unpinnable,
)
from railyard.topology.cluster.model import GpuNode
from railyard.topology.cluster.nodes import PodUsage

SLICES = "resourceslices"
CLAIMS = "resourceclaims"
KINDS = (SLICES, CLAIMS)


@dataclass(frozen=True, slots=True)
class ClaimView:
    """What the operator keeps of a ResourceClaim: who it is and what its allocation holds."""

    namespace: str
    name: str
    uid: str
    resource_version: int | None
    devices: tuple[DeviceKey, ...]

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


def claim_view(body: Mapping[str, Any]) -> ClaimView:
    meta = body.get("metadata") or {}
    return ClaimView(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""),
                     resource_version(body), allocated(body))


class Devices:
    """Slices and claims as the reflectors deliver them. The state turns `held(key)` into a holder of
    its Usage, so a claim's GPUs count exactly like a pod's named ones."""

    def __init__(self, names: DeviceNames) -> None:
        self.names = names
        self._slices: dict[str, tuple[int | None, SliceDevices | None]] = {}
        self._slices_of_node: dict[str, set[str]] = {}
        self.nodes: dict[str, NodeDevices] = {}
        self._where: dict[DeviceKey, tuple[str, int | None]] = {}  # device -> (node, GPU index | None for a NIC)
        self._keys_of_node: dict[str, set[DeviceKey]] = {}
        self.claims: dict[Key, ClaimView] = {}
        self._holder: dict[DeviceKey, Key] = {}  # allocated device -> the claim holding it
        self._claims_of_pool: dict[tuple[str, str], set[Key]] = {}
        self.epoch = 0  # bumps when a node's published devices change

    # --- slices ---------------------------------------------------------------------------------

    def slice_version(self, name: str) -> int | None:
        held = self._slices.get(name)
        return held[0] if held is not None else None

    def has_slice(self, name: str) -> bool:
        return name in self._slices

    def apply_slice(self, event_type: str | None, body: Mapping[str, Any]) -> set[Key]:
        """Record a slice; the claims whose node's devices changed (their holdings are recomputed)."""
        name = str((body.get("metadata") or {}).get("name") or "")
        old = self._slices.get(name)
        if event_type == "DELETED":
            self._slices.pop(name, None)
            return self._renode(old[1].node if old is not None and old[1] is not None else None)
        devices = read_slice(body, self.names)
        self._slices[name] = (resource_version(body), devices)
        touched = set()
        if old is not None and old[1] is not None and (devices is None or old[1].node != devices.node):
            touched |= self._renode(old[1].node)
        if devices is not None:
            self._slices_of_node.setdefault(devices.node, set()).add(name)
            if old is None or old[1] != devices:
                touched |= self._renode(devices.node)
        return touched

    def _renode(self, node: str | None) -> set[Key]:
        """Re-merge the node's slices; the claims in its pools when what it publishes changed."""
        if node is None:
            return set()
        live = {n for n in self._slices_of_node.get(node, ())
                if (held := self._slices.get(n)) is not None and held[1] is not None and held[1].node == node}
        self._slices_of_node[node] = live
        before = self.nodes.get(node)
        merged = merge(s for n in sorted(live) if (s := self._slices[n][1]) is not None).get(node)
        for key in self._keys_of_node.pop(node, ()):
            self._where.pop(key, None)
        if merged is None:
            self.nodes.pop(node, None)
        else:
            self.nodes[node] = merged
            self._where.update(device_index({node: merged}))
            self._keys_of_node[node] = merged.keys()
        if before == merged:
            return set()
        self.epoch += 1
        pools = {(k[0], k[1]) for k in (merged.keys() if merged else set()) | (before.keys() if before else set())}
        return {k for pool in pools for k in self._claims_of_pool.get(pool, ())}

    def slice_names(self) -> Iterator[tuple[str, int | None]]:
        return ((n, rv) for n, (rv, _) in self._slices.items())

    # --- claims ---------------------------------------------------------------------------------

    def apply_claim(self, event_type: str | None, view: ClaimView) -> None:
        self._drop_claim(view.key)
        if event_type == "DELETED":
            return
        self.claims[view.key] = view
        for device in view.devices:
            self._holder[device] = view.key
            self._claims_of_pool.setdefault((device[0], device[1]), set()).add(view.key)

    def _drop_claim(self, key: Key) -> None:
        old = self.claims.pop(key, None)
        if old is None:
            return
        for device in old.devices:
            if self._holder.get(device) == key:
                del self._holder[device]
            members = self._claims_of_pool.get((device[0], device[1]))
            if members is not None:
                members.discard(key)

    def forget_claim(self, key: Key) -> None:
        self._drop_claim(key)

    def held(self, key: Key) -> PodUsage | None:
        """The GPUs claim `key`'s allocation holds, as a usage of their node (None: none known)."""
        view = self.claims.get(key)
        if view is None:
            return None
        node, gpus = None, []
        for device in view.devices:
            where = self._where.get(device)
            if where is not None and where[1] is not None:
                node = node or where[0]
                if where[0] == node:
                    gpus.append(where[1])
        if node is None:
            return None
        indices = tuple(sorted(set(gpus)))
        return PodUsage(node, indices, len(indices), {})

    def holder(self, device: DeviceKey) -> Key | None:
        """The claim whose allocation holds the device, if any."""
        return self._holder.get(device)

    def blocking(self, claim: Key, node: str, gpus: Iterable[int],
                 leaving: Callable[[Key], bool] = lambda _: False) -> str | None:
        """Why claim `claim` (pinning these GPUs of the node and their rail NICs) cannot be allocated, if
        a device it names is gone or held by another claim; None when nothing known stands in its way,
        when it is allocated, and when no such claim exists (a device-plugin pod, or a claim being created).
        A holder `leaving` says is on its way out (its pod terminating, or the job's own earlier attempt's)
        stands in no way: its devices are freed when it goes."""
        view = self.claims.get(claim)
        if view is None or view.devices:
            return None
        published = self.nodes.get(node)
        for index in gpus:
            gpu = published.gpus.get(index) if published is not None else None
            if gpu is None:
                return f"GPU {index} of node {node} is no longer published in a ResourceSlice"
            nic = published.nic_for(index) if published is not None else None
            for what, device in ((f"GPU {index}", gpu.key), (f"the rail NIC of GPU {index}", nic.key if nic else None)):
                if device is None:
                    return f"{what} of node {node} is no longer published in a ResourceSlice"
                holder = self._holder.get(device)
                if holder is not None and holder != claim and not leaving(holder):
                    return f"{what} of node {node} ({'/'.join(device)}) is allocated to claim {holder[0]}/{holder[1]}"
        return None

    def unpinnable(self, models: Iterable[GpuNode], required: bool) -> dict[str, str]:
        """Nodes whose replicas cannot be pinned (topology.devices.unpinnable), by reason; `required`
        (RAILYARD_DRA=on): also those whose GPUs no slice publishes."""
        out = {}
        for node in models:
            published = self.nodes.get(node.name)
            why = unpinnable(node.gpu_count, published)
            if why is None and required and (published is None or not published.gpus):
                why = "no ResourceSlice publishes its GPUs (RAILYARD_DRA=on)"
            if why is not None:
                out[node.name] = why
        return out

