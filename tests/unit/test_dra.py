"""DRA mode (issue 25) on the in-memory API: what the operator creates (one ResourceClaim per pod,
pinning the chosen GPUs by uuid and their rail NICs by PCIe root), what it counts (every claim's
allocation), and how a claim that cannot be allocated is explained. The rig's slices come from
hack/dra_slices.py, the publisher the e2e rig uses."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.operator.decide.resource_claims import CLAIM_REF, use_claim
from railyard.topology.cluster.dra_devices import PCIE_ROOT, allocated, inventory, rail_order, unpinnable
from railyard.topology.cluster.nodes import build_snapshot, node_from_object

from tests.support import status as cond
from tests.support.clusters import profile_nodes
from tests.support.harness import Rig, rig
from tests.support.jobs import make_job
from tests.support.nodes import taint
from tests.support.rig import load_hack_module

publisher = load_hack_module("dra_slices", "dra_slices.py")


def _slices(node: dict[str, Any]) -> list[dict[str, Any]]:
    return publisher.slices_for(node_from_object(node))


def _claims(r: Rig) -> dict[str, dict[str, Any]]:
    return {name: c for (_, name), c in r.api.objects["resourceclaims"].items()}


def _allocate(r: Rig, namespace: str, name: str, node: str, gpus: list[int], nics: bool = True) -> None:
    """kube-scheduler's allocation of a claim (or a foreign claim made allocated) on these GPUs."""
    devices = inventory(r.api.objects["resourceslices"].values())[node]
    results = [{"request": f"gpu-{i}", "driver": "gpu.nvidia.com", "pool": node, "device": devices.gpus[g].key[2]}
               for i, g in enumerate(gpus)]
    if nics:
        results += [{"request": f"nic-{i}", "driver": "dra.net", "pool": node, "device": devices.nic_for(g).key[2]}
                    for i, g in enumerate(gpus)]
    key = (namespace, name)
    claim = copy.deepcopy(r.api.objects["resourceclaims"].get(key) or {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"devices": {"requests": []}}})
    claim["status"] = {"allocation": {"devices": {"results": results}}}
    r.api._store("resourceclaims", claim, "MODIFIED" if key in r.api.objects["resourceclaims"] else "ADDED")
    r.deliver()


# --- the pure parts ---------------------------------------------------------------------------------

def test_the_rig_publishes_every_gpu_with_its_rail_nic_under_one_pcie_root():
    node = profile_nodes(leaves=1, tors=1, nodes=1)[0]
    devices = inventory(_slices(node))[node["metadata"]["name"]]
    assert sorted(devices.gpus) == list(range(8)) and len(devices.nics) == 8
    assert all(devices.nic_for(g) is not None and devices.nic_for(g).pcie_root == devices.gpus[g].pcie_root
               for g in range(8))
    assert unpinnable(8, devices) is None


def test_a_node_short_of_published_devices_is_unpinnable_naming_what_is_missing():
    node = profile_nodes(leaves=1, tors=1, nodes=1)[0]
    gpus, nics = _slices(node)
    gpus["spec"]["devices"] = [d for d in gpus["spec"]["devices"] if d["name"] != "gpu-5"]
    assert "no GPU with index 5" in unpinnable(8, inventory([gpus, nics])[node["metadata"]["name"]])
    gpus, nics = _slices(node)
    nics["spec"]["devices"] = [d for d in nics["spec"]["devices"] if d["name"] != "nic-2"]
    assert "GPU 2" in unpinnable(8, inventory([gpus, nics])[node["metadata"]["name"]])


@given(st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True), st.permutations(list(range(8))))
@settings(max_examples=200, deadline=None)
def test_rail_order_sorts_a_replicas_gpus_by_rail(gpus, rails):
    ordered = rail_order(gpus, tuple(rails))
    assert sorted(ordered) == sorted(gpus)
    assert [rails[g] for g in ordered] == sorted(rails[g] for g in gpus)


def test_use_claim_moves_the_gpus_from_the_device_plugin_to_the_claim():
    spec = {"containers": [{"name": "sidecar", "resources": {"limits": {"cpu": "1"}}},
                           {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "4"},
                                                             "requests": {"nvidia.com/gpu": 8}}}]}
    use_claim(spec, "job-0")
    sidecar, trainer = spec["containers"]
    assert trainer["resources"] == {"limits": {"cpu": "4"}, "requests": {}, "claims": [{"name": CLAIM_REF}]}
    assert "claims" not in sidecar["resources"]
    assert spec["resourceClaims"] == [{"name": CLAIM_REF, "resourceClaimName": "job-0"}]


def test_the_planner_counts_a_foreign_claims_gpus_from_a_dump_with_resource_slices():
    nodes = profile_nodes(leaves=1, tors=1, nodes=2)
    name = nodes[0]["metadata"]["name"]
    slices = [{"kind": "ResourceSlice", **s} for n in nodes for s in _slices(n)]
    claim = {"kind": "ResourceClaim", "metadata": {"name": "theirs", "namespace": "t"},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "g", "driver": "gpu.nvidia.com", "pool": name, "device": "gpu-3"}]}}}}
    assert build_snapshot(nodes, (), device_objects=[*slices, claim]).used == {name: frozenset({3})}
    assert not build_snapshot(nodes, (), device_objects=slices).used
    broken = [s for s in slices if s["metadata"]["name"] != f"{name}-nics"]
    excluded = build_snapshot(nodes, (), device_objects=broken).excluded
    assert [e.node for e in excluded] == [name] and "rail NIC" in excluded[0].reason


# --- the operator -------------------------------------------------------------------------------------

def test_each_pod_gets_a_claim_it_owns_pinning_its_gpus_by_uuid_and_their_nics_by_pcie_root():
    r = rig(nodes=2, dra=True)
    r.submit(make_job("j", 4, gpus=4))
    r.step()
    pods = {name: p for (_, name), p in r.api.objects["pods"].items()}
    claims = _claims(r)
    assert set(claims) == set(pods)
    devices = inventory(r.api.objects["resourceslices"].values())
    for name, pod in pods.items():
        node = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        gpus = [int(g) for g in pod["metadata"]["annotations"]["railyard.dev/gpus"].split(",")]
        claim = claims[name]
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        requests = claim["spec"]["devices"]["requests"]
        uuids = [devices[node].gpus[g].uuid for g in gpus]
        assert [q["name"] for q in requests] == [f"{k}-{i}" for i in range(len(gpus)) for k in ("gpu", "nic")]
        assert [u in q["exactly"]["selectors"][0]["cel"]["expression"] for q, u in zip(requests[::2], uuids,
                                                                                        strict=True)] == [True] * 4
        roots = [devices[node].gpus[g].pcie_root for g in gpus]
        assert all(root in q["exactly"]["selectors"][0]["cel"]["expression"]
                   for q, root in zip(requests[1::2], roots, strict=True))
        assert claim["spec"]["devices"]["constraints"] == [
            {"requests": [f"gpu-{i}", f"nic-{i}"], "matchAttribute": PCIE_ROOT} for i in range(4)]
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["CUDA_VISIBLE_DEVICES"].split(",") == uuids
        assert env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{g}" for g in gpus)  # the rig: rail = GPU index
        assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"].get("limits", {})
    assert r.reason("j") == "Released"


def test_a_foreign_claim_on_gpu_3_is_held_and_railyard_places_around_it():
    r = rig(nodes=1, dra=True)
    node = next(iter(r.state.nodes))
    _allocate(r, "tenant", "theirs", node, [3], nics=False)
    assert r.state.snapshot().used == {node: frozenset({3})}
    r.submit(make_job("j", 1, gpus=4))
    r.step()
    gpus = r.status("j")["placement"]["ranks"][0]["gpus"]
    assert 3 not in gpus and len(gpus) == 4


def test_a_claim_blocked_by_a_foreign_allocation_rolls_back_naming_device_and_holder():
    r = rig(nodes=1, dra=True)
    node = next(iter(r.state.nodes))
    r.submit(make_job("j", 1, gpus=8))
    r.step()
    assert r.reason("j") == "Released"
    pod = next(iter(_claims(r)))
    theirs = "GPU 6"
    _allocate(r, "tenant", "theirs", node, [6], nics=False)  # allocated before Railyard's claim was
    r.step()
    placed = r.condition("j", cond.PLACED) or {}
    assert placed.get("reason") == "DeviceUnavailable", placed
    assert theirs in placed["message"] and "tenant/theirs" in placed["message"], placed["message"]
    events = [e for e in r.api.posted_events if e["reason"] == "DeviceUnavailable"]
    assert events and events[0]["message"] == placed["message"]
    assert pod not in _claims(r), "the rolled-back pod's claim goes with it"
    r.pods_gone()
    r.step()
    assert r.reason("j") in ("Unschedulable", "Reserving")  # 8 GPUs on this node are no longer free
    assert not r.status("j").get("placement")


def test_an_allocated_claim_of_its_own_is_not_a_conflict():
    r = rig(nodes=1, dra=True)
    node = next(iter(r.state.nodes))
    r.submit(make_job("j", 1, gpus=8))
    r.step()
    pod = next(iter(_claims(r)))
    _allocate(r, "default", pod, node, list(range(8)))
    r.step()
    assert r.reason("j") == "Released"
    assert r.state.snapshot().used == {node: frozenset(range(8))}


def test_dra_on_excludes_nodes_no_slice_publishes_and_auto_uses_the_device_plugin_there():
    r = rig(nodes=2, dra=True)
    names = sorted(r.state.nodes)
    r.api._remove("resourceslices", ("", f"{names[1]}-gpus"))
    r.api._remove("resourceslices", ("", f"{names[1]}-nics"))
    r.deliver()
    assert not r.state.snapshot().excluded  # auto: that node is the device plugin's
    r.state.dra_required = True
    r.state._changed_nodes()
    assert [(e.node, "no ResourceSlice" in e.reason) for e in r.state.snapshot().excluded] == [(names[1], True)]


def test_a_released_device_plugin_pod_waiting_to_bind_is_never_taken_for_a_blocked_claim():
    """Auto mode reads slices; a node no slice publishes is the device plugin's: its released, not yet
    bound pods have no claim, so nothing about devices can stand in their way."""
    r = rig(nodes=1, dra=True)
    node = next(iter(r.state.nodes))
    r.api._remove("resourceslices", ("", f"{node}-gpus"))
    r.api._remove("resourceslices", ("", f"{node}-nics"))
    r.deliver()
    r.submit(make_job("j", 1, gpus=8))
    r.step(3)
    assert r.reason("j") == "Released" and not _claims(r)
    assert not [e for e in r.api.posted_events if e["reason"] == "DeviceUnavailable"]


def test_claims_a_failed_pass_left_missing_are_created_before_the_gang_is_released():
    """Write-ahead: the pods exist but their claims do not (the API failed, or a leader stopped between
    the two); the next pass creates the missing claims for the existing pods, then releases."""
    from railyard.operator.kube.client import ApiException

    r = rig(nodes=1, dra=True)
    create = r.api.create
    failed: list[str] = []

    async def flaky(plural: str, body: dict[str, Any]):
        if plural == "resourceclaims" and not failed:
            failed.append(body["metadata"]["name"])
            raise ApiException(status=500, reason="etcd leader changed")
        return await create(plural, body)

    r.api.create = flaky  # type: ignore[method-assign]
    r.submit(make_job("j", 2, gpus=4))
    r.step()
    assert failed and r.reason("j") != "Released"
    gated = [p for p in r.api.objects["pods"].values() if p["spec"].get("schedulingGates")]
    assert len(gated) == 2, "nothing is released while a claim is missing"
    r.clock.advance(60)
    r.step(2)
    assert r.reason("j") == "Released"
    pods = {name: p["metadata"]["uid"] for (_, name), p in r.api.objects["pods"].items()}
    assert {n: c["metadata"]["ownerReferences"][0]["uid"] for n, c in _claims(r).items()} == pods


def test_a_claim_seen_before_its_nodes_slices_counts_once_they_arrive_and_stops_when_they_go():
    """Reflectors deliver kinds in no order: an allocation naming devices not yet published holds
    nothing until the slice arrives, then holds its GPUs; a deleted slice takes them along."""
    r = rig(nodes=1, dra=True)
    node = next(iter(r.state.nodes))
    gpus_slice = r.api.objects["resourceslices"][("", f"{node}-gpus")]
    r.api._remove("resourceslices", ("", f"{node}-gpus"))
    r.deliver()
    claim = {"metadata": {"name": "early", "namespace": "t"}, "status": {"allocation": {"devices": {"results": [
        {"request": "g", "driver": "gpu.nvidia.com", "pool": node, "device": "gpu-2"}]}}}}
    r.api._store("resourceclaims", claim, "ADDED")
    r.deliver()
    assert not r.state.snapshot().used
    r.api._store("resourceslices", copy.deepcopy(gpus_slice), "ADDED")
    r.deliver()
    assert r.state.snapshot().used == {node: frozenset({2})}
    r.api._remove("resourceslices", ("", f"{node}-gpus"))
    r.deliver()
    assert not r.state.snapshot().used


def _allocate_ranks(r: Rig, job: str, only_free: bool = False) -> None:
    """kube-scheduler allocates the claims of the job's current placement, as pinned (`only_free`: those whose
    devices no other claim holds), and binds the pods whose claims are allocated."""
    held = {d for c in _claims(r).values() for d in allocated(c)}
    for rank in r.status(job)["placement"]["ranks"]:
        claim = _claims(r).get(rank["pod"])
        if claim is None or claim.get("status"):
            continue
        devices = inventory(r.api.objects["resourceslices"].values())[rank["node"]]
        if only_free and any(devices.gpus[g].key in held for g in rank["gpus"]):
            continue
        _allocate(r, "default", rank["pod"], rank["node"], rank["gpus"])
    r.api.bind_released(lambda pod: bool((_claims(r).get(pod["metadata"]["name"]) or {}).get("status")))
    r.deliver()


def test_a_restart_behind_slow_exits_waits_for_its_own_predecessors_claims():
    """A DRA-pinned gang loses a node while its survivors take their time to exit: the new attempt's claims pin
    the devices the survivors' old claims still hold. That is the gang's own past, not someone else's: the
    restart waits for it (no DeviceUnavailable roll-back), and the healthy ranks keep their nodes."""
    r = rig(nodes=3, dra=True)
    r.api.graceful = True  # a graceful delete leaves the pod Terminating (a checkpoint on SIGTERM)
    r.submit(make_job("j", 2, gpus=8))
    r.step()
    _allocate_ranks(r, "j")
    r.step()
    assert r.reason("j", cond.RUNNING) == "AllRunning"
    before = r.nodes_of("j")
    taint(r.api, r.state, before[1], "nvidia.com/gpu-fault", "NoExecute")
    r.step()
    status = r.status("j")
    assert status["restartCount"] == 1 and r.nodes_of("j")[0] == before[0] and r.nodes_of("j")[1] != before[1]
    old = [p for p in _claims(r) if _claims(r)[p].get("status") and p.startswith("j-")]
    assert old, "the survivors' old claims still hold their devices while their pods exit"
    # kube-scheduler binds a pod once its claim is allocated: the new rank 1; the new rank 0's claim waits
    # for rank 0's old one.
    _allocate_ranks(r, "j", only_free=True)
    for _ in range(3):
        r.step()
        assert r.reason("j") != "DeviceUnavailable", r.condition("j", cond.PLACED)
    assert r.nodes_of("j")[0] == before[0], "the healthy rank keeps its node"
    r.pods_gone()  # the survivors exit; their claims go with them
    _allocate_ranks(r, "j")
    r.step()
    assert r.status("j")["restartCount"] == 1 and r.reason("j", cond.RUNNING) == "AllRunning"
    assert r.nodes_of("j")[0] == before[0]


def test_a_foreign_claim_still_blocks_a_restart_at_once():
    """Only the gang's own predecessors are waited for: another tenant's allocation on a pinned device rolls
    back as before."""
    r = rig(nodes=1, dra=True)
    r.submit(make_job("j", 1, gpus=8))
    r.step()
    node = next(iter(r.state.nodes))
    _allocate(r, "tenant", "j-0", node, [6], nics=False)  # a foreign claim that even looks like a rank's name
    r.step()
    assert r.reason("j") == "DeviceUnavailable"
