"""Small synchronous helpers over the official Kubernetes client (CLI use)."""

from __future__ import annotations

from typing import Any

from railyard.operator.labels import ANNOTATION_GPUS, LABEL_JOB, LABEL_RANK
from railyard.operator.state import placement_reservations
from railyard.topology.api import GROUP, PLURAL, VERSION, TrainingJob
from railyard.topology.labels import LabelScheme
from railyard.topology.nodes import build_snapshot, parse_gpu_annotation
from railyard.topology.planner import PlanResult
from railyard.topology.request import GangRequest
from railyard.topology.solver import Decision, Placement


def _api(kubeconfig: str | None):
    from kubernetes import config

    return config.new_client_from_config(config_file=kubeconfig) if kubeconfig else \
        config.new_client_from_config()


def list_nodes_and_pods(kubeconfig: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from kubernetes import client

    api = _api(kubeconfig)
    core = client.CoreV1Api(api)
    nodes = api.sanitize_for_serialization(core.list_node().items)
    pods = api.sanitize_for_serialization(
        core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed").items
    )
    # Placements recorded by the operator hold their GPUs even before their pods exist.
    try:
        jobs = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    except client.ApiException as e:
        if e.status != 404:  # no CRD installed: no reservations
            raise
        jobs = []
    return nodes, pods + list(placement_reservations(jobs))


def live_placements(kubeconfig: str | None, scheme: LabelScheme, namespace: str | None = None) -> PlanResult:
    """The cluster's TrainingJobs as planner decisions, built from their bound pods (the truth),
    so `railyard status` draws them exactly like `railyard plan` draws a plan."""
    from kubernetes import client

    api = _api(kubeconfig)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    nodes = api.sanitize_for_serialization(core.list_node().items)
    pods = api.sanitize_for_serialization(core.list_pod_for_all_namespaces().items)
    jobs = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    if namespace:
        jobs = [j for j in jobs if j["metadata"]["namespace"] == namespace]
    background = [p for p in pods if not (p["metadata"].get("labels") or {}).get(LABEL_JOB)]
    before = build_snapshot(nodes, background, scheme)
    after = build_snapshot(nodes, pods, scheme)
    decisions = []
    for job in sorted(jobs, key=lambda j: (j["metadata"]["namespace"], j["metadata"]["name"])):
        meta = job["metadata"]
        try:
            request = GangRequest.from_job(TrainingJob.model_validate(job))
        except ValueError as e:
            decisions.append(Decision(GangRequest(meta["name"], 1, 0, namespace=meta["namespace"]), None,
                                      f"invalid spec: {e}"))
            continue
        bound = sorted(
            (p for p in pods if p["metadata"]["namespace"] == meta["namespace"]
             and (p["metadata"].get("labels") or {}).get(LABEL_JOB) == meta["name"]
             and p["spec"].get("nodeName") and after.has_node(p["spec"]["nodeName"])),
            key=lambda p: int(p["metadata"]["labels"].get(LABEL_RANK, 0)))
        if not bound:
            placed = next((c for c in (job.get("status") or {}).get("conditions") or [] if c["type"] == "Placed"),
                          None)
            decisions.append(Decision(request, None, placed["message"] if placed else "not placed yet"))
            continue
        replicas = [(after.node(p["spec"]["nodeName"]),
                     parse_gpu_annotation(p["metadata"]["annotations"][ANNOTATION_GPUS])) for p in bound]
        decisions.append(Decision(request, Placement.from_replicas(replicas), None))
    return PlanResult(tuple(decisions), before, after, 0.0)
