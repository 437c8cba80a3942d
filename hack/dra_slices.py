#!/usr/bin/env python3
"""The rig's DRA driver stand-in: ResourceSlices for kwok nodes, made from their topology labels, and
the DeviceClasses Railyard's claims name. kwok prepares nothing; kube-scheduler's DRA plugin (on by
default since 1.34) allocates from these slices, which is what the tests exercise.

    hack/dra_slices.py publish [--selector type=kwok]   slices for every matching node, DeviceClasses
    hack/dra_slices.py remove                           every slice and DeviceClass this script made

Per node, as NVIDIA's GPU driver and DraNet name things (railyard.topology.cluster.dra_devices):
- driver gpu.nvidia.com, pool = node name, devices gpu-<i> with index, uuid, minor, productName, type,
  resource.kubernetes.io/pcieRoot (one root per rail: pci<rail>:00), resource.kubernetes.io/numaNode and
  nvlinkIsland (the rig's own attribute, from the gpu-nvlink label);
- driver dra.net, pool = node name, one RDMA NIC per rail: nic-<rail> with rdma=true, ifName ib<rail>,
  rdmaDevice mlx5_<rail>, the rail's pcieRoot and NUMA node.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster
from railyard.topology.cluster.dra_devices import NUMA_NODE, PCIE_ROOT, STANDARD
from railyard.topology.cluster.model import GpuNode
from railyard.topology.cluster.nodes import NodeError, node_from_object

RIG_LABEL = "railyard.dev/rig-dra"
NAMES = STANDARD
GROUP, VERSION = "resource.k8s.io", "v1"


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{index}.railyard.dev')}"


def pcie_root(rail: int) -> str:
    return f"pci{rail:04x}:00"


def _attrs(**values: Any) -> dict[str, dict[str, Any]]:
    kinds = {bool: "bool", int: "int", str: "string"}
    return {k.replace("__", "/").replace("_dot_", "."): {kinds[type(v)]: v} for k, v in values.items()}


def slices_for(node: GpuNode) -> list[dict[str, Any]]:
    """The node's GPU slice and NIC slice."""
    gpus = []
    for i in range(node.gpu_count):
        attributes = _attrs(index=i, minor=i, uuid=gpu_uuid(node.name, i), type="gpu",
                            productName=node.product or "NVIDIA-H100-80GB-HBM3", nvlinkIsland=node.nvlink[i])
        attributes[PCIE_ROOT] = {"string": pcie_root(node.rails[i])}
        attributes[NUMA_NODE] = {"int": node.numa[i]}
        gpus.append({"name": f"gpu-{i}", "attributes": attributes})
    nics = []
    for rail in sorted(set(node.rails)):
        numa = node.numa[node.rails.index(rail)]
        attributes = _attrs(rdma=True, ifName=f"ib{rail}", rdmaDevice=f"mlx5_{rail}")
        attributes[PCIE_ROOT] = {"string": pcie_root(rail)}
        attributes[NUMA_NODE] = {"int": numa}
        nics.append({"name": f"nic-{rail}", "attributes": attributes})

    def body(driver: str, suffix: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"{node.name}-{suffix}", "labels": {RIG_LABEL: "true"}},
                "spec": {"driver": driver, "nodeName": node.name,
                         "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}

    return [body(NAMES.gpu_driver, "gpus", gpus), body(NAMES.nic_driver, "nics", nics)]


def device_classes() -> list[dict[str, Any]]:
    def body(name: str, expression: str) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": name, "labels": {RIG_LABEL: "true"}},
                "spec": {"selectors": [{"cel": {"expression": expression}}]}}

    return [body(NAMES.gpu_class, f'device.driver == "{NAMES.gpu_driver}"'),
            body(NAMES.nic_class, f'device.driver == "{NAMES.nic_driver}" && '
                                  f'device.attributes["{NAMES.nic_driver}"].rdma == true')]


def _client() -> Any:
    """$KUBECONFIG's cluster when set (the e2e suite's), else the rig's."""
    import os

    if not os.environ.get("KUBECONFIG"):
        return cluster.api()
    from kubernetes import config

    return config.new_client_from_config(config_file=os.environ["KUBECONFIG"])


def _post(api: Any, plural: str, body: dict[str, Any]) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    cluster.create_idempotent(lambda: custom.create_cluster_custom_object(GROUP, VERSION, plural, body))


def publish(selector: str) -> int:
    from kubernetes import client

    api = _client()
    core = client.CoreV1Api(api)
    t0 = time.monotonic()
    nodes = []
    for obj in core.list_node(label_selector=selector).items:
        raw = api.sanitize_for_serialization(obj)
        try:
            nodes.append(node_from_object(raw))
        except NodeError as e:
            print(f"[dra] skipping node {raw['metadata']['name']}: {e}", file=sys.stderr)
    for body in device_classes():
        _post(api, "deviceclasses", body)
    bodies = [s for n in nodes for s in slices_for(n)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda b: _post(api, "resourceslices", b), bodies))
    print(f"[dra] published {len(bodies)} ResourceSlices for {len(nodes)} nodes in {time.monotonic() - t0:.1f}s",
          file=sys.stderr)
    return 0


def remove() -> int:
    from kubernetes import client

    custom = client.CustomObjectsApi(_client())
    for plural in ("resourceslices", "deviceclasses"):
        custom.delete_collection_cluster_custom_object(GROUP, VERSION, plural, label_selector=f"{RIG_LABEL}=true")
    print("[dra] removed the rig's ResourceSlices and DeviceClasses", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("publish")
    p.add_argument("--selector", default=cluster.KWOK_LABEL)
    sub.add_parser("remove")
    args = parser.parse_args(argv)
    return publish(args.selector) if args.command == "publish" else remove()


if __name__ == "__main__":
    sys.exit(main())
