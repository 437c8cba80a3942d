"""DRA mode on the real control plane (issue 25): ResourceSlices published for the rig's kwok nodes
(hack/dra_slices.py), Railyard creating one ResourceClaim per pod, kube-scheduler allocating them.
Everything is read back from the API: the claims' allocations, not Railyard's intentions."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.faults import FAULT, bound_generation, ranks_of, untaint
from tests.support.jobs import (
    create_job,
    get_job,
    gpus_of,
    make_job,
    on_nodes,
    pinned,
    placeable_by_tor,
    wait_bound,
    wait_condition,
)
from tests.support.poll import poll
from tests.support.rig import rig_binary

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION = "resource.k8s.io", "v1"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def _publisher(*args: str) -> None:
    subprocess.run([sys.executable, str(REPO / "hack" / "dra_slices.py"), *args], check=True)


@pytest.fixture(scope="module")
def slices(api_client):
    """The rig's slices for the kwok nodes (another cluster: its own driver's slices, or skip)."""
    custom = client.CustomObjectsApi(api_client)
    if os.environ.get("RAILYARD_LOCAL_RIG"):
        _publisher("publish")
        yield
        _publisher("remove")
        return
    if not custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices", limit=1)["items"]:
        pytest.skip("no ResourceSlices in this cluster")
    yield


def _devices(api_client) -> dict[tuple[str, str, str], dict]:
    """(driver, pool, device) -> its attributes, as published."""
    out = {}
    for s in client.CustomObjectsApi(api_client).list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]:
        spec = s["spec"]
        for d in spec.get("devices") or []:
            attrs = {k: next(iter(v.values())) for k, v in (d.get("attributes") or {}).items()}
            out[(spec["driver"], spec["pool"]["name"], d["name"])] = {**attrs, "node": spec.get("nodeName")}
    return out


def _claim(api_client, namespace: str, name: str) -> dict | None:
    with contextlib.suppress(client.ApiException):
        return client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "resourceclaims", name)
    return None


def _allocated(api_client, pod: dict, devices: dict) -> tuple[list[dict], list[dict]]:
    """The pod's claim's allocated GPUs and NICs (attributes), in request order (gpu-0, nic-0, ...)."""
    ref = next(c["resourceClaimName"] for c in pod["spec"]["resourceClaims"] if c["name"] == "railyard-devices")
    claim = poll(lambda: (c := _claim(api_client, pod["metadata"]["namespace"], ref)) and
                 (c.get("status") or {}).get("allocation") and c, 30, f"claim {ref} allocated")
    results = sorted(claim["status"]["allocation"]["devices"]["results"],
                     key=lambda r: (int(r["request"].split("-")[1]), r["request"]))
    gpus = [devices[(r["driver"], r["pool"], r["device"])] for r in results if r["request"].startswith("gpu-")]
    nics = [devices[(r["driver"], r["pool"], r["device"])] for r in results if r["request"].startswith("nic-")]
    return gpus, nics


def _env(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}


def _rail(core, node: str, gpu: int) -> int:
    return int(core.read_node(node).metadata.labels["topology.railyard.dev/gpu-rail"].split(".")[gpu])


def test_every_pod_of_a_stream_gets_exactly_the_devices_railyard_chose(slices, operator, api_client, core, custom,
                                                                      namespace):
    """Whole-node and partial-node gangs: each claim's allocation equals the pod's chosen GPUs, each
    GPU's NIC is under its PCIe root, the env lists them in rail order, and every DP ring edge
    between nodes (local rank j of rank i to local rank j of rank i+1) stays on one rail."""
    jobs = {"whole": (4, 8), "halves": (4, 4), "pairs": (6, 2), "single": (3, 1)}
    for name, (replicas, gpus) in jobs.items():
        create_job(custom, namespace, make_job(name, replicas, gpus=gpus))
    devices = _devices(api_client)
    for name, (replicas, _) in jobs.items():
        pods = wait_bound(api_client, core, namespace, name, replicas, timeout=120)
        rails_by_rank = []
        for pod in pods:
            node = pod["spec"]["nodeName"]
            assert "nvidia.com/gpu" not in (pod["spec"]["containers"][0].get("resources") or {}).get("limits", {})
            got_gpus, got_nics = _allocated(api_client, pod, devices)
            assert {g["node"] for g in got_gpus + got_nics} == {node}
            assert sorted(g["index"] for g in got_gpus) == sorted(gpus_of(pod)), pod["metadata"]["name"]
            assert [n[PCIE_ROOT] for n in got_nics] == [g[PCIE_ROOT] for g in got_gpus]
            env = _env(pod)
            assert env["CUDA_VISIBLE_DEVICES"].split(",") == [g["uuid"] for g in got_gpus]
            assert env["NCCL_IB_HCA"] == "=" + ",".join(dict.fromkeys(n["rdmaDevice"] for n in got_nics))
            rails = [_rail(core, node, g["index"]) for g in got_gpus]
            assert rails == sorted(rails), "local ranks follow rail order"
            rails_by_rank.append((node, rails))
        for (node_a, a), (node_b, b) in itertools.pairwise(rails_by_rank):
            if node_a != node_b:  # within a node the edge is NVLink, no NIC
                assert a == b, f"{name}: a DP ring edge {node_a} -> {node_b} crosses rails: {a} -> {b}"


def _idle_node(core) -> str:
    busy = {p.spec.node_name for p in core.list_pod_for_all_namespaces().items
            if p.spec.node_name and (p.status.phase or "") not in ("Succeeded", "Failed")}
    nodes = sorted(n.metadata.name for n in core.list_node(label_selector="type=kwok").items
                   if not n.spec.unschedulable and not n.spec.taints and n.metadata.name not in busy
                   and (n.status.allocatable or {}).get("nvidia.com/gpu") == "8")
    if not nodes:
        pytest.skip("no idle 8-GPU kwok node")
    return nodes[-1]


def _foreign_claim(api_client, core, tenant: str, node: str, gpu: int, gated: bool = False) -> str:
    """Another tenant's claim on GPU `gpu` of `node` and a pod using it (allocated once the pod schedules)."""
    uid = next(d["uuid"] for k, d in _devices(api_client).items() if d["node"] == node and d.get("index") == gpu
               and k[0] == "gpu.nvidia.com")
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, VERSION, tenant, "resourceclaims", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim", "metadata": {"name": "mine"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": f'device.attributes["gpu.nvidia.com"].uuid == "{uid}"'}}]}}]}}})
    core.create_namespaced_pod(tenant, {
        "metadata": {"name": "foreign"},
        "spec": {**({"schedulingGates": [{"name": "example.com/wait"}]} if gated else {}),
                 "nodeSelector": {"kubernetes.io/hostname": node},
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": "mine"}],
                 "containers": [{"name": "c", "image": "registry.invalid/x:0",
                                 "resources": {"claims": [{"name": "gpu"}]}}]}})
    return "mine"


def test_a_foreign_claim_on_gpu_3_keeps_railyard_off_it(slices, operator, api_client, core, custom, namespace,
                                                         tenant):
    node = _idle_node(core)
    _foreign_claim(api_client, core, tenant, node, 3)
    poll(lambda: (c := _claim(api_client, tenant, "mine")) and (c.get("status") or {}).get("allocation"), 30,
         "the foreign claim allocated")
    create_job(custom, namespace, on_nodes(make_job("beside", 1, gpus=4), {"kubernetes.io/hostname": node}))
    pod = wait_bound(api_client, core, namespace, "beside", 1, timeout=60)[0]
    assert 3 not in gpus_of(pod)
    got, _ = _allocated(api_client, pod, _devices(api_client))
    assert sorted(g["index"] for g in got) == sorted(gpus_of(pod))


def test_a_claim_that_cannot_be_allocated_rolls_back_naming_the_device(slices, operator, api_client, core, custom,
                                                                       namespace, tenant):
    """The job's pod waits after release for a PersistentVolumeClaim that does not exist yet (volume
    binding is kube-scheduler's); meanwhile another tenant takes one of its GPUs. Railyard rolls the
    gang back naming the GPU and the claim that holds it, and re-plans around it."""
    node = _idle_node(core)
    body = on_nodes(make_job("raced", 1, gpus=8), {"kubernetes.io/hostname": node})
    body["spec"]["template"]["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "later"}}]
    create_job(custom, namespace, body)
    poll(lambda: [p for p in core.list_namespaced_pod(namespace, label_selector="railyard.dev/job-name=raced").items
                  if not p.spec.scheduling_gates and not p.spec.node_name], 60,
         "the job's pod released by Railyard, unbound (its volume claim is missing)")
    _foreign_claim(api_client, core, tenant, node, 5)
    event = poll(lambda: next((e for e in core.list_namespaced_event(namespace).items
                               if e.reason == "DeviceUnavailable" and e.involved_object.name == "raced"), None),
                 60, "a DeviceUnavailable event")
    assert "GPU 5" in event.message and f"{tenant}/mine" in event.message, event.message
    # Re-planned around the foreign GPU: the node has 7 free, the job needs 8 there, so it waits, saying so.
    job = wait_condition(custom, namespace, "raced", "Placed", "False", reason="Unschedulable", timeout=60)
    assert not [p for p in core.list_namespaced_pod(namespace, label_selector="railyard.dev/job-name=raced").items
                if not p.metadata.deletion_timestamp], job["status"]


SLOW_EXIT = "e2e.railyard.dev/slow-exit"  # stands in for ranks that take their grace period to save and exit


def _slow_exits(core, namespace: str, job: str) -> None:
    for pod in core.list_namespaced_pod(namespace, label_selector=f"railyard.dev/job-name={job}").items:
        core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"finalizers": [SLOW_EXIT]}})


def _exits_done(core, namespace: str) -> None:
    for pod in core.list_namespaced_pod(namespace).items:
        if SLOW_EXIT in (pod.metadata.finalizers or []):
            with contextlib.suppress(client.ApiException):
                core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"finalizers": None}})


def _watch_restart(core, custom, namespace: str, name: str, kept: dict[str, str], seconds: float) -> None:
    """While the old pods take their time to exit, the restart waits for its own predecessors' claims: no
    DeviceUnavailable roll-back, and the healthy ranks keep their nodes (observed for `seconds`)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        events = [e for e in core.list_namespaced_event(namespace).items
                  if e.reason == "DeviceUnavailable" and e.involved_object.name == name]
        assert not events, [e.message for e in events]
        ranks = {str(r["rank"]): r["node"] for r in get_job(custom, namespace, name)["status"]["placement"]["ranks"]}
        assert all(ranks[r] == node for r, node in kept.items()), (ranks, kept)
        time.sleep(1)  # an observation window: nothing is awaited, a failure is caught as it happens


def test_a_dra_gang_through_a_drain_and_a_node_loss_with_slow_exits_keeps_its_healthy_ranks(
        slices, operator, api_client, core, custom, namespace, kubeconfig):
    """A 3 x 8 gang pinning GPUs and NICs through claims: a node is drained (cordoned, its rank evicted), then
    another is lost (a NoExecute GPU-fault taint), each while the ranks take their time to exit. The new
    attempt's claims name the devices the survivors' old claims still hold: it waits for them, never rolls back
    on its own devices, and the healthy ranks keep their nodes."""
    tor, nodes = max(placeable_by_tor(core).items(), key=lambda kv: (len(kv[1]), kv[0]))
    assert len(nodes) >= 5, nodes
    create_job(custom, namespace, pinned("pinned", 3, tor, gpus=8, topology={"requiredTier": "tor"}))
    before = ranks_of(wait_bound(api_client, core, namespace, "pinned", 3, timeout=120))
    wait_condition(custom, namespace, "pinned", "Running", timeout=60)
    drained, lost = before["2"], before["0"]
    try:
        _slow_exits(core, namespace, "pinned")
        drain = subprocess.Popen([str(rig_binary("kubectl")), "--kubeconfig", kubeconfig, "drain", drained,
                                  "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        poll(lambda: (get_job(custom, namespace, "pinned").get("status") or {}).get("restartCount") == 1, 60,
             "the drained gang restarted")
        _watch_restart(core, custom, namespace, "pinned", {"0": before["0"], "1": before["1"]}, 15)
        _exits_done(core, namespace)
        output, _ = drain.communicate(timeout=120)
        assert drain.returncode == 0, output
        after = ranks_of(bound_generation(api_client, core, namespace, "pinned", 3))
        assert after["0"] == before["0"] and after["1"] == before["1"] and after["2"] != drained, after
        devices = _devices(api_client)
        for pod in bound_generation(api_client, core, namespace, "pinned", 3):
            got, _ = _allocated(api_client, pod, devices)
            assert sorted(g["index"] for g in got) == sorted(gpus_of(pod)), "claims exact after the drain"
        wait_condition(custom, namespace, "pinned", "Running", timeout=60)
        # Now a node is lost under the gang, the survivors again slow to exit.
        _slow_exits(core, namespace, "pinned")
        core.patch_node(lost, {"spec": {"taints": [FAULT]}})
        poll(lambda: (get_job(custom, namespace, "pinned").get("status") or {}).get("restartCount") == 2, 60,
             "the gang restarted after the node loss")
        _watch_restart(core, custom, namespace, "pinned", {"1": after["1"], "2": after["2"]}, 15)
        _exits_done(core, namespace)
        final = ranks_of(bound_generation(api_client, core, namespace, "pinned", 3, gen=2))
        assert final["1"] == after["1"] and final["2"] == after["2"] and final["0"] != lost, final
        for pod in bound_generation(api_client, core, namespace, "pinned", 3, gen=2):
            got, _ = _allocated(api_client, pod, _devices(api_client))
            assert sorted(g["index"] for g in got) == sorted(gpus_of(pod)), "claims exact after the loss"
        assert get_job(custom, namespace, "pinned")["status"]["restartCount"] == 2, "no roll-back, no extra attempt"
    finally:
        _exits_done(core, namespace)
        core.patch_node(drained, {"spec": {"unschedulable": None}})
        untaint(core, lost, FAULT["key"])
