"""Pure builders for DRA mode: the ResourceClaim that pins a replica's chosen GPUs and their rail NICs,
the pod's reference to it, and the launcher environment that follows the allocation.

One claim per pod, named after it and owned by it (garbage-collected with it). Each GPU is requested
by its identity (uuid) and its NIC by the GPU's PCIe root, with a `matchAttribute` constraint on that
root, so kube-scheduler allocates exactly what the placement chose or nothing (then the gang rolls
back naming the device: decide/assess) — unless the holder is on its way out (`claim_leaving`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from railyard.operator.base.keys import ANNOTATION_GPUS, ANNOTATION_PLACEMENT_ID, LABEL_JOB
from railyard.operator.base.objects import Key, PodView
from railyard.topology.cluster.dra_devices import PCIE_ROOT, DeviceNames, NodeDevices
from railyard.topology.cluster.labels import GPU_RESOURCE
from railyard.topology.cluster.pod_trust import of_job

CLAIM_REF = "railyard-devices"  # the pod's name for its claim (spec.resourceClaims[].name)
_ROOT_DOMAIN, _ROOT_NAME = PCIE_ROOT.split("/")


def claim_name(pod_name: str) -> str:
    return pod_name


def claim_leaving(pods: Mapping[Key, PodView], job: Key, placement_id: str, holder: Key) -> bool:
    """Whether a claim holding a device a new claim of this job pins is on its way out, so the new one waits
    instead of rolling back: its pod (a claim is named after its pod, which owns it) is terminating, or is one
    of this job's earlier attempts (a restart's survivors taking their time to exit), or is gone while the
    claim waits for the garbage collector."""
    namespace, job_name = job
    pod = pods.get(holder)  # claim_name is the pod's name
    if pod is None:
        return holder[0] == namespace and of_job(holder[1], job_name)
    return pod.terminating or (pod.job_key == job and pod.placement_id != placement_id)


def _cel(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_claim(pod: dict[str, Any], job_name: str, gpus: Sequence[int], devices: NodeDevices,
                names: DeviceNames) -> dict[str, Any]:
    """The claim for a created pod (`pod` as the API server returned it: its uid owns the claim).
    `gpus` in rail order, every one published with a rail NIC (the materialiser checks). Two requests
    per GPU: the API's limit of 32 requests per claim allows 16 GPUs per replica."""
    meta = pod["metadata"]
    requests: list[dict[str, Any]] = []
    constraints: list[dict[str, Any]] = []
    for i, index in enumerate(gpus):
        gpu = devices.gpus[index]
        requests.append({"name": f"gpu-{i}", "exactly": {
            "deviceClassName": names.gpu_class,
            "selectors": [{"cel": {"expression": f'device.attributes[{_cel(names.gpu_driver)}].uuid == '
                                                 f'{_cel(gpu.uuid)}'}}]}})
        requests.append({"name": f"nic-{i}", "exactly": {
            "deviceClassName": names.nic_class,
            "selectors": [{"cel": {"expression": f'device.attributes[{_cel(_ROOT_DOMAIN)}].{_ROOT_NAME} == '
                                                 f'{_cel(gpu.pcie_root)}'}}]}})
        constraints.append({"requests": [f"gpu-{i}", f"nic-{i}"], "matchAttribute": PCIE_ROOT})
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": claim_name(meta["name"]), "namespace": meta["namespace"],
                     "labels": {LABEL_JOB: job_name},
                     "annotations": {ANNOTATION_GPUS: ",".join(map(str, gpus)),
                                     ANNOTATION_PLACEMENT_ID: (meta.get("annotations") or {}).get(
                                         ANNOTATION_PLACEMENT_ID, "")},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"devices": {"requests": requests, "constraints": constraints}},
    }


def use_claim(spec: dict[str, Any], pod_name: str) -> None:
    """Point the pod at its claim: the containers that asked for GPUs (the first one if none did) get
    them through it, and the device plugin's resource goes (kube-scheduler would count it twice)."""
    spec["resourceClaims"] = [c for c in spec.get("resourceClaims") or [] if c.get("name") != CLAIM_REF] + \
        [{"name": CLAIM_REF, "resourceClaimName": claim_name(pod_name)}]
    containers = spec.get("containers") or []
    wanting = [i for i, c in enumerate(containers)
               if any(GPU_RESOURCE in ((c.get("resources") or {}).get(part) or {}) for part in ("limits", "requests"))]
    for i, container in enumerate(containers):
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            if GPU_RESOURCE in (resources.get(part) or {}):
                resources[part] = {k: v for k, v in resources[part].items() if k != GPU_RESOURCE}
        if i in (wanting or [0]):
            resources["claims"] = [c for c in copy.deepcopy(resources.get("claims") or [])
                                   if c.get("name") != CLAIM_REF] + [{"name": CLAIM_REF}]
        if resources:
            container["resources"] = resources


def device_env(gpus: Sequence[int], devices: NodeDevices) -> dict[str, str]:
    """Local rank i drives the i-th GPU in rail order (CUDA_VISIBLE_DEVICES by uuid, so the order is
    ours whatever the container enumerates first) and NCCL uses exactly the replica's rail NICs."""
    hcas: list[str] = []
    for index in gpus:
        nic = devices.nic_for(index)
        if nic is not None and nic.hca not in hcas:
            hcas.append(nic.hca)
    env = {"CUDA_VISIBLE_DEVICES": ",".join(devices.gpus[i].uuid for i in gpus)}
    if hcas:
        env["NCCL_IB_HCA"] = "=" + ",".join(hcas)  # "=": exact names, not prefixes (mlx5_1 is not mlx5_10)
    return env
