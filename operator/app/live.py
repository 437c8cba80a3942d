"""Reads of a live cluster for the CLI (`railyard plan --kubeconfig`, `railyard status`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from railyard.operator.app.display import explanation, topology
from railyard.operator.base.keys import ANNOTATION_GPUS, ANNOTATION_PLACEMENT_ID, LABEL_JOB, LABEL_RANK
from railyard.operator.base.objects import parse_job
from railyard.operator.kube.client import ApiException, KubeApi
from railyard.topology.api import GROUP, PLURAL, VERSION, TrainingJob
from railyard.topology.claims import pod_name, trust_placements
from railyard.topology.decision import decide, inter_pod_limits, pod_infos
from railyard.topology.labels import LabelScheme
from railyard.topology.node_rules import excluded_nodes
from railyard.topology.nodes import Trust, build_snapshot, parse_gpu_annotation
from railyard.topology.planner import PlanResult
from railyard.topology.request import GangRequest
from railyard.topology.solver import Decision, Placement

JOBS_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"


def _jobs(api: KubeApi) -> list[dict[str, Any]]:
    try:
        return api.list_all(JOBS_PATH)
    except ApiException as e:
        if e.status != 404:  # no CRD installed: no jobs
            raise
        return []


def placement_reservations(jobs: Iterable[Mapping[str, Any]]) -> Iterable[dict[str, Any]]:
    """Recorded placements of live jobs, as pseudo-pods (the CLI lists instead of watching): their
    GPUs are held before their pods exist. They carry the job's pod labels, for inter-pod rules."""
    for body in jobs:
        job = parse_job(body)
        placement = job.placement
        if placement is None or job.finished:
            continue
        labels = job.request.pod_labels if job.request is not None else {LABEL_JOB: job.name}
        owner = [{"uid": job.uid, "controller": True}]  # named and owned as the rank's pod: believed
        for rank in placement.ranks:
            name = rank.pod or pod_name(job.name, rank.rank, placement.serial)
            yield {"metadata": {"namespace": job.namespace, "name": name, "ownerReferences": owner,
                                "labels": dict(labels),
                                "annotations": {ANNOTATION_GPUS: ",".join(map(str, rank.gpus)),
                                                ANNOTATION_PLACEMENT_ID: placement.id}},
                   "spec": {"nodeName": rank.node}, "status": {"phase": "Pending"}}


def list_nodes_and_pods(kubeconfig: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Trust]:
    """Nodes, pods (with the recorded placements as pods: they hold their GPUs before their pods
    exist), and whose GPU claims to believe (topology.claims), as the operator counts them."""
    api = KubeApi(workers=1, kubeconfig=kubeconfig)
    nodes = api.list_all("/api/v1/nodes") + _devices(api)
    pods = api.list_all("/api/v1/pods", [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")])
    jobs = _jobs(api)
    return nodes, pods + list(placement_reservations(jobs)), trust_placements(jobs)


def _devices(api: KubeApi) -> list[dict[str, Any]]:
    """ResourceSlices and ResourceClaims (kind set: list items carry none); none where DRA is not served."""
    out: list[dict[str, Any]] = []
    for kind, plural in (("ResourceSlice", "resourceslices"), ("ResourceClaim", "resourceclaims")):
        try:
            out += [{**o, "kind": kind} for o in api.list_all(f"/apis/resource.k8s.io/v1/{plural}")]
        except ApiException as e:
            if e.status not in (403, 404):
                raise
    return out


def live_placements(kubeconfig: str | None, scheme: LabelScheme, namespace: str | None = None) -> PlanResult:
    """The cluster's TrainingJobs as planner decisions, built from their bound pods (the truth),
    so `railyard status` draws them exactly like `railyard plan` draws a plan."""
    api = KubeApi(workers=1, kubeconfig=kubeconfig)
    nodes = api.list_all("/api/v1/nodes")
    pods = api.list_all("/api/v1/pods")
    jobs = _jobs(api)
    if namespace:
        jobs = [j for j in jobs if j["metadata"]["namespace"] == namespace]
    trusted = trust_placements(_jobs(api))
    background = [p for p in pods if not (p["metadata"].get("labels") or {}).get(LABEL_JOB)]
    before = build_snapshot(nodes, background, scheme, trusted)
    after = build_snapshot(nodes, pods, scheme, trusted)
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
        decisions.append(Decision(request, Placement.from_replicas(replicas, after.levels), None))
    return PlanResult(tuple(decisions), before, after, 0.0)


def list_jobs(kubeconfig: str | None, namespace: str | None = None) -> list[dict[str, Any]]:
    jobs = _jobs(KubeApi(workers=1, kubeconfig=kubeconfig))
    return [j for j in jobs if namespace is None or j["metadata"]["namespace"] == namespace]


def cluster_topology(kubeconfig: str | None, scheme: LabelScheme) -> dict[str, Any]:
    api = KubeApi(workers=1, kubeconfig=kubeconfig)
    nodes = api.list_all("/api/v1/nodes")
    pods = api.list_all("/api/v1/pods", [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")])
    trusted = trust_placements(_jobs(api))
    return topology(build_snapshot(nodes, pods, scheme, trusted), pods, trusted)


def explain_job(kubeconfig: str | None, scheme: LabelScheme, namespace: str, name: str) -> dict[str, Any]:
    """Why a job waits: the solver on the live cluster (without the job's own pods and placement),
    the nodes it may not use and why, its conditions and events."""
    api = KubeApi(workers=1, kubeconfig=kubeconfig)
    try:
        job = api.request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}")
    except ApiException as e:
        if e.status == 404:
            raise ValueError(f"TrainingJob {namespace}/{name} not found") from None
        raise
    nodes = api.list_all("/api/v1/nodes")
    pods = [p for p in api.list_all("/api/v1/pods", [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")])
            if not (p["metadata"]["namespace"] == namespace
                    and (p["metadata"].get("labels") or {}).get(LABEL_JOB) == name)]
    others = [j for j in _jobs(api) if (j["metadata"]["namespace"], j["metadata"]["name"]) != (namespace, name)]
    trusted = trust_placements(others)
    snapshot = build_snapshot(nodes, pods + list(placement_reservations(others)), scheme, trusted)
    events = api.list_all(f"/api/v1/namespaces/{namespace}/events",
                          [("fieldSelector", f"involvedObject.name={name},involvedObject.kind=TrainingJob")])
    events.sort(key=lambda e: e.get("lastTimestamp") or "")
    try:
        request = GangRequest.from_job(TrainingJob.model_validate(job))
    except ValueError as e:
        return explanation(job, f"invalid spec: {e}", False, {}, events[-10:])
    infos = pod_infos(pods + list(placement_reservations(others)), trusted)
    decision = decide(snapshot, request, infos)
    limits = inter_pod_limits(snapshot, request, infos)
    return explanation(job, decision.reason, decision.placed, excluded_nodes(snapshot, request, limits),
                       events[-10:])
