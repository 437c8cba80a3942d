"""Reads of a live cluster for the CLI (`railyard plan --kubeconfig`, `status`, `jobs`, `topology`,
`explain`): what the operator would see, listed page by page with progress for a person at a TTY."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from railyard.operator.app.display import explanation, topology
from railyard.operator.app.terminal import quiet
from railyard.operator.base.keys import (
    ANNOTATION_GPUS,
    ANNOTATION_LABEL_PRESET,
    ANNOTATION_PLACEMENT_ID,
    ANNOTATION_TOPOLOGY_LEVELS,
    LABEL_JOB,
    LABEL_RANK,
)
from railyard.operator.base.objects import parse_job
from railyard.operator.base.settings import LeaderSettings
from railyard.operator.kube.client import ApiException, KubeApi, cli_connection
from railyard.topology.api.job import GROUP, PLURAL, VERSION, TrainingJob
from railyard.topology.cluster.labels import LabelScheme
from railyard.topology.cluster.node_rules import excluded_nodes
from railyard.topology.cluster.nodes import Trust, build_snapshot, parse_gpu_annotation
from railyard.topology.cluster.pod_trust import pod_name, trust_placements
from railyard.topology.planner.plan import PlanResult
from railyard.topology.solver.decision import decide, inter_pod_limits, pod_infos
from railyard.topology.solver.placement import Decision, Placement
from railyard.topology.solver.request import GangRequest

JOBS_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
LIVE = "status.phase!=Succeeded,status.phase!=Failed"  # pods that hold resources
# Where the chart (leaderElection.namespace) and a plain `railyard operator` (RAILYARD_NAMESPACE) put the Lease.
LEASE_NAMESPACES = ("kube-system", "railyard-system")


@dataclass
class Cluster:
    """A connection as kubectl makes it (kubeconfig, context) and the context's namespace."""

    api: KubeApi
    namespace: str
    server: str
    progress: Callable[[str], None] = field(default=quiet)

    def list(self, what: str, path: str, query: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        return self.api.list_all(path, query, on_page=lambda n: self.progress(f"listing {what}: {n:,}"))


def connect(kubeconfig: str | None, context: str | None, progress: Callable[[str], None] = quiet) -> Cluster:
    api_client, namespace = cli_connection(kubeconfig, context)
    return Cluster(KubeApi(workers=1, api_client=api_client), namespace, api_client.configuration.host, progress)


def operator_topology(cluster: Cluster, namespaces: Iterable[str] = LEASE_NAMESPACES) -> tuple[str, str] | None:
    """(label preset, topology levels) the operator in the cluster reads nodes with, from its Lease; None
    when no Lease is readable (no operator, or no right to read it)."""
    name = LeaderSettings.model_fields["lease_name"].default
    for namespace in namespaces:
        try:
            lease = cluster.api.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
        except ApiException as e:
            if e.status in (403, 404):
                continue
            raise
        annotations = lease["metadata"].get("annotations") or {}
        if ANNOTATION_LABEL_PRESET in annotations:
            return annotations[ANNOTATION_LABEL_PRESET], annotations.get(ANNOTATION_TOPOLOGY_LEVELS, "")
    return None


def _jobs(cluster: Cluster) -> list[dict[str, Any]]:
    try:
        return cluster.list("TrainingJobs", JOBS_PATH)
    except ApiException as e:
        if e.status != 404:  # no CRD installed: no jobs
            raise
        return []


def priority_classes(cluster: Cluster) -> list[dict[str, Any]]:
    return [{**c, "kind": "PriorityClass"}
            for c in cluster.list("PriorityClasses", "/apis/scheduling.k8s.io/v1/priorityclasses")]


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


def list_nodes_and_pods(cluster: Cluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Trust]:
    """Nodes, pods (with the recorded placements as pods: they hold their GPUs before their pods
    exist), and whose GPU claims to believe (topology.claims), as the operator counts them."""
    nodes = cluster.list("nodes", "/api/v1/nodes") + _devices(cluster)
    pods = cluster.list("pods", "/api/v1/pods", [("fieldSelector", LIVE)])
    jobs = _jobs(cluster)
    return nodes, pods + list(placement_reservations(jobs)), trust_placements(jobs)


def _devices(cluster: Cluster) -> list[dict[str, Any]]:
    """ResourceSlices and ResourceClaims (kind set: list items carry none); none where DRA is not served."""
    out: list[dict[str, Any]] = []
    for kind, plural in (("ResourceSlice", "resourceslices"), ("ResourceClaim", "resourceclaims")):
        try:
            out += [{**o, "kind": kind} for o in cluster.list(plural, f"/apis/resource.k8s.io/v1/{plural}")]
        except ApiException as e:
            if e.status not in (403, 404):
                raise
    return out


def live_placements(cluster: Cluster, scheme: LabelScheme, namespace: str | None) -> PlanResult:
    """The TrainingJobs of `namespace` (None: all) as planner decisions, built from their bound pods (the
    truth), so `railyard status` draws them exactly like `railyard plan` draws a plan."""
    nodes = cluster.list("nodes", "/api/v1/nodes")
    pods = cluster.list("pods", "/api/v1/pods")
    every_job = _jobs(cluster)
    jobs = [j for j in every_job if namespace is None or j["metadata"]["namespace"] == namespace]
    trusted = trust_placements(every_job)
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


def list_jobs(cluster: Cluster, namespace: str | None) -> list[dict[str, Any]]:
    """The TrainingJobs of `namespace` (None: every namespace)."""
    path = JOBS_PATH if namespace is None else f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    try:
        return cluster.list("TrainingJobs", path)
    except ApiException as e:
        if e.status != 404:
            raise
        return []


def cluster_topology(cluster: Cluster, scheme: LabelScheme) -> dict[str, Any]:
    nodes = cluster.list("nodes", "/api/v1/nodes")
    pods = cluster.list("pods", "/api/v1/pods", [("fieldSelector", LIVE)])
    trusted = trust_placements(_jobs(cluster))
    return topology(build_snapshot(nodes, pods, scheme, trusted), pods, trusted)


class JobNotFound(LookupError):
    pass


def explain_job(cluster: Cluster, scheme_of: Callable[[], LabelScheme], namespace: str, name: str) -> dict[str, Any]:
    """Why a job waits: the solver on the live cluster (without the job's own pods and placement),
    the nodes it may not use and why, its conditions and events. The label scheme is read once the job
    is known to exist."""
    api = cluster.api
    try:
        job = api.request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}")
    except ApiException as e:
        if e.status == 404:
            raise JobNotFound(f"TrainingJob {namespace}/{name} not found") from None
        raise
    scheme = scheme_of()
    nodes = cluster.list("nodes", "/api/v1/nodes")
    pods = [p for p in cluster.list("pods", "/api/v1/pods", [("fieldSelector", LIVE)])
            if not (p["metadata"]["namespace"] == namespace
                    and (p["metadata"].get("labels") or {}).get(LABEL_JOB) == name)]
    others = [j for j in _jobs(cluster) if (j["metadata"]["namespace"], j["metadata"]["name"]) != (namespace, name)]
    trusted = trust_placements(others)
    snapshot = build_snapshot(nodes, pods + list(placement_reservations(others)), scheme, trusted)
    events = cluster.list("events", f"/api/v1/namespaces/{namespace}/events",
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
