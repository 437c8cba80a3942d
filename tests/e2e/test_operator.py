"""The operator end to end: jobs applied through the API land on real (kwok) nodes, bound by
kube-scheduler; every check reads pods and nodes back from the API server."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest
import requests
from kubernetes import client, watch
from railyard.topology.cluster.nodes import pinned_node

from tests.support.jobs import (
    condition,
    create_job,
    delete_job,
    get_job,
    gpus_of,
    make_job,
    placeable_nodes,
    pods_of,
    wait_bound,
    wait_condition,
)
from tests.support.poll import poll

pytestmark = pytest.mark.e2e


def node_labels(core) -> dict[str, dict[str, str]]:
    return {n.metadata.name: n.metadata.labels or {} for n in core.list_node().items}


def assert_no_gpu_double_booked(api_client, core) -> None:
    pods = api_client.sanitize_for_serialization(core.list_pod_for_all_namespaces().items)
    held = Counter()
    for pod in pods:
        annotations = pod["metadata"].get("annotations") or {}
        if pod["spec"].get("nodeName") and "railyard.dev/gpus" in annotations and \
                pod["status"].get("phase") not in ("Succeeded", "Failed"):
            for gpu in gpus_of(pod):
                held[(pod["spec"]["nodeName"], gpu)] += 1
    doubles = {k: v for k, v in held.items() if v > 1}
    assert not doubles, f"GPUs held twice: {doubles}"


def test_jobs_of_several_sizes_land_where_their_constraints_say(operator, api_client, core, custom, namespace):
    jobs = {
        "whole": make_job("whole", 8, topology={"preferredTier": "tor"}),
        "partial": make_job("partial", 4, gpus=4, topology={"railAlignment": "required"}),
        "leafbound": make_job("leafbound", 6, topology={"requiredTier": "leaf"},
                              parallelism={"tensor": 8, "pipeline": 2, "data": 3}),
    }
    for body in jobs.values():
        create_job(custom, namespace, body)
    labels = node_labels(core)
    placed = {name: wait_bound(api_client, core, namespace, name, body["spec"]["replicas"])
              for name, body in jobs.items()}
    for name, pods in placed.items():
        for pod in pods:
            # kube-scheduler bound each pod to the node Railyard pinned it to.
            assert pod["spec"]["nodeName"] == pinned_node(pod["spec"])
            assert len(gpus_of(pod)) == jobs[name]["spec"]["template"]["spec"]["containers"][0]["resources"][
                "limits"]["nvidia.com/gpu"]
    leaves = {labels[p["spec"]["nodeName"]]["topology.railyard.dev/leaf"] for p in placed["leafbound"]}
    assert len(leaves) == 1, f"requiredTier leaf broken: {leaves}"
    # 4 x 4 GPUs pack onto 2 nodes in a snake; every cross-node ring edge stays on one rail.
    partial = sorted(placed["partial"], key=lambda p: int(p["metadata"]["labels"]["railyard.dev/rank"]))
    ring = []
    for pod in partial:
        rails = labels[pod["spec"]["nodeName"]]["topology.railyard.dev/gpu-rail"].split(".")
        ring.append((pod["spec"]["nodeName"], [rails[g] for g in gpus_of(pod)]))
    assert len({node for node, _ in ring}) == 2, ring
    for (node, rails), (peer, peer_rails) in zip(ring, ring[1:] + ring[:1], strict=True):
        assert node == peer or rails == peer_rails, f"not rail-aligned: {ring}"
    # Ranks follow the topology: each TOR holds one contiguous run of ranks.
    tors = [labels[p["spec"]["nodeName"]]["topology.railyard.dev/tor"] for p in placed["whole"]]
    runs = [t for i, t in enumerate(tors) if i == 0 or tors[i - 1] != t]
    assert len(runs) == len(set(runs)), f"ranks jump between TORs: {tors}"
    assert_no_gpu_double_booked(api_client, core)
    env = {e["name"]: e.get("value", "") for e in placed["whole"][3]["spec"]["containers"][0]["env"]}
    assert env["RANK"] == "3" and env["WORLD_SIZE"] == "8" and env["PET_NPROC_PER_NODE"] == "8"
    assert env["MASTER_ADDR"] == f"whole-0.whole.{namespace}.svc" and env["NCCL_CROSS_NIC"] == "0"
    job = wait_condition(custom, namespace, "whole", "Placed", reason="Released")
    assert job["status"]["placement"]["tors"] == len(set(tors))
    service = core.read_namespaced_service("whole", namespace)
    assert service.spec.cluster_ip == "None"


def test_gang_is_released_only_after_every_pod_exists(operator, api_client, core, custom, namespace):
    events: list[tuple[str, str, bool]] = []
    stop = threading.Event()

    def record() -> None:
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=60):
            pod = ev["object"]
            gated = any(g.name == "railyard.dev/gang" for g in pod.spec.scheduling_gates or [])
            events.append((ev["type"], pod.metadata.name, gated))
            if stop.is_set():
                w.stop()

    thread = threading.Thread(target=record, daemon=True)
    thread.start()
    poll(lambda: thread.is_alive(), 5, "watch started")
    create_job(custom, namespace, make_job("gang", 12))
    wait_bound(api_client, core, namespace, "gang", 12)
    stop.set()
    created_before_release = set()
    for kind, name, gated in events:
        if kind == "ADDED":
            assert gated, f"pod {name} was created without the gang gate"
            created_before_release.add(name)
        if not gated:
            assert len(created_before_release) == 12, \
                f"{name} released while only {len(created_before_release)} of 12 pods existed"
            break
    else:
        pytest.fail(f"no release seen in {len(events)} events")


def test_unplaceable_job_waits_with_a_reason_and_is_placed_when_capacity_frees(
        operator, api_client, core, custom, namespace):
    usable = len(placeable_nodes(core))
    blocker = usable - 20
    create_job(custom, namespace, make_job("blocker", blocker))
    wait_bound(api_client, core, namespace, "blocker", blocker, timeout=90)
    create_job(custom, namespace, make_job("waiting", 30))
    job = wait_condition(custom, namespace, "waiting", "Placed", status="False", reason="Unschedulable")
    message = condition(job, "Placed")["message"]
    assert "job needs 30" in message and "free whole nodes" in message
    assert not pods_of(api_client, core, namespace, "waiting")
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=waiting").items
    assert any(e.reason == "Unschedulable" for e in events)
    delete_job(custom, namespace, "blocker")
    wait_bound(api_client, core, namespace, "waiting", 30, timeout=120)
    assert_no_gpu_double_booked(api_client, core)


@pytest.mark.parametrize(("spec", "message"), [
    ({"replicas": 2, "minReplicas": 3}, "spec.minReplicas must be <= spec.replicas"),
    ({"replicas": 2, "topology": {"requiredTier": "Rack"}}, "spec.topology.requiredTier in body should match"),
    ({"replicas": 0}, "spec.replicas: Invalid value: 0"),
    ({"replicas": 2, "parallelism": {"tensor": 8, "pipeline": 3, "data": 1}}, "tensor*pipeline*data must equal"),
])
def test_malformed_job_is_rejected_by_the_api_server(crds, custom, namespace, spec, message):
    body = make_job("bad", 2)
    body["spec"].update(spec)
    with pytest.raises(client.ApiException) as err:
        create_job(custom, namespace, body)
    assert err.value.status == 422
    assert message in json.loads(err.value.body)["message"]


def test_a_pod_lives_as_long_as_its_template_asks_then_the_job_succeeds(operator, api_client, core, custom,
                                                                       namespace):
    """The rig's lifetime stage (hack/kwok-stages): what the living-cluster runs give each job."""
    if not any((n.metadata.labels or {}).get("type") == "kwok" for n in core.list_node().items):
        pytest.skip("needs kwok nodes to simulate a container's lifetime")
    create_job(custom, namespace, make_job("timed", 2, annotations={"railyard.dev/simulate-lifetime": "8s"}))
    running = wait_condition(custom, namespace, "timed", "Running", timeout=60)
    started = condition(running, "Running")["lastTransitionTime"]
    done = wait_condition(custom, namespace, "timed", "Succeeded", timeout=60)
    from railyard.topology.api.timestamps import epoch

    lived = epoch(done["status"]["completionTime"], 0) - epoch(started, 0)
    assert lived >= 6, f"the pods were to live 8 s; the job ran {lived:.0f} s"


def test_every_ranks_name_is_its_pods_ip_in_the_operators_endpoint_slice_and_follows_a_restart(
        operator, api_client, core, custom, namespace):
    """The Service has no selector, so kube-controller-manager writes no endpoints for it: the operator's
    EndpointSlice is what CoreDNS serves `<job>-<rank>.<job>.<ns>.svc` from (the real-node test resolves
    the names)."""
    discovery = client.DiscoveryV1Api(api_client)
    create_job(custom, namespace, make_job("named", 3))
    wait_condition(custom, namespace, "named", "Running", timeout=60)

    def names() -> dict[str, str] | None:
        slices = discovery.list_namespaced_endpoint_slice(namespace, label_selector="kubernetes.io/service-name=named")
        ips = {p["spec"]["hostname"]: p["status"].get("podIP") for p in pods_of(api_client, core, namespace, "named")
               if not p["metadata"].get("deletionTimestamp")}
        found = {e.hostname: e.addresses[0] for s in slices.items for e in s.endpoints or []}
        return found if found == ips and len(found) == 3 and all(ips.values()) else None

    first = poll(names, 60, "an EndpointSlice naming every rank's pod IP")
    slices = discovery.list_namespaced_endpoint_slice(namespace, label_selector="kubernetes.io/service-name=named")
    assert [s.metadata.labels["endpointslice.kubernetes.io/managed-by"] for s in slices.items] == \
        ["operator.railyard.dev"], "one slice, the operator's: no controller follows the pods"
    assert core.read_namespaced_service("named", namespace).spec.selector is None
    victim = next(p for p in pods_of(api_client, core, namespace, "named") if p["spec"]["hostname"] == "named-1")
    core.delete_namespaced_pod(victim["metadata"]["name"], namespace, grace_period_seconds=0)
    wait_condition(custom, namespace, "named", "Restarting", status="False", timeout=90)
    second = poll(names, 90, "the slice naming the new attempt's pods")
    assert second["named-1"] != first["named-1"] or second != first


def test_job_succeeds_or_fails_with_its_pods(operator, api_client, core, custom, namespace):
    if not any((n.metadata.labels or {}).get("type") == "kwok" for n in core.list_node().items):
        pytest.skip("needs kwok nodes to simulate containers exiting")
    create_job(custom, namespace, make_job("ok", 2, annotations={"railyard.dev/simulate": "succeed"}))
    create_job(custom, namespace, make_job("broken", 3, annotations={"railyard.dev/simulate": "fail"},
                                          faultPolicy={"maxRestarts": 1, "restartBackoff": {"initialSeconds": 1}}))
    job = wait_condition(custom, namespace, "ok", "Succeeded")
    assert job["status"].get("completionTime")
    job = wait_condition(custom, namespace, "broken", "Failed", timeout=90)
    # The process failure was retried once, in place (same nodes, generation 1), then the job failed.
    assert job["status"]["processRestarts"] == 1 and job["status"]["restartCount"] == 1
    assert job["status"]["lastRestart"]["reason"] == "ProcessFailed" and not job["status"]["lastRestart"]["lostNodes"]
    message = condition(job, "Failed")["message"]
    assert "simulated NCCL failure" in message and "after 1 restarts" in message
    # A failed gang does not keep half its replicas running.
    poll(lambda: all(p["status"]["phase"] in ("Failed", "Succeeded") for p in pods_of(api_client, core, namespace,
                                                                                      "broken")),
         60, "no running replica of the failed gang")


def test_metrics_are_exposed(operator, custom, namespace, api_client, core):
    create_job(custom, namespace, make_job("metered", 1))
    wait_bound(api_client, core, namespace, "metered", 1)
    text = poll(lambda: (r := requests.get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5)).ok
                and r.text, 20, "metrics")
    for name in ("railyard_jobs{", "railyard_queue_length", "railyard_placement_solve_seconds_bucket",
                 "railyard_job_release_seconds_bucket", "railyard_free_gpus", "railyard_placements_total",
                 'railyard_largest_free_block_nodes{tier="tor"}', "railyard_is_leader 1.0"):
        assert name in text, f"{name} missing from /metrics"
    assert get_job(custom, namespace, "metered")["status"]["replicas"] == 1


def test_plan_reads_the_live_cluster(operator, api_client, core, custom, namespace, kubeconfig, tmp_path, capsys):
    from railyard.operator.app.cli import main

    create_job(custom, namespace, make_job("resident", 4))
    resident = wait_bound(api_client, core, namespace, "resident", 4)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(json.dumps(make_job("whatif", 2)))
    assert main(["plan", "--kubeconfig", kubeconfig, "--jobs", str(jobs), "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)["jobs"][0]
    assert plan["placed"] and len(plan["ranks"]) == 2
    taken = {p["spec"]["nodeName"] for p in resident}
    assert not taken & {r["node"] for r in plan["ranks"]}, "the plan reused GPUs that are in use"
    assert not pods_of(api_client, core, namespace, "whatif"), "planning creates nothing"
