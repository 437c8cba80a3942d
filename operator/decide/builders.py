"""Pure builders of the objects the operator creates (dask-kubernetes style `build_*` functions): a
TrainingJob and a placement in, plain dicts out. Nothing here does I/O."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from railyard.operator.base.keys import (
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT_ID,
    LABEL_JOB,
    LABEL_RANK,
    LABEL_RESTART,
    SCHEDULING_GATE,
)
from railyard.operator.base.objects import Job
from railyard.operator.decide.resource_claims import device_env, use_claim
from railyard.topology.api.job import API_VERSION, KIND, DomainCount, PlacementStatus, RankPlacement
from railyard.topology.cluster.dra_devices import NodeDevices
from railyard.topology.cluster.pod_trust import pod_name
from railyard.topology.solver.placement import Placement
from railyard.topology.solver.request import job_pod_labels

MAX_NAME = 63
TOKEN_VOLUME = "railyard-token"
TOKEN_DIR = "/var/run/secrets/railyard.dev"  # railyard.worker's default token file is TOKEN_DIR/token


@dataclass(frozen=True)
class PodOptions:
    """Operator-wide settings every replica pod reflects."""

    master_port: int = 29500
    report_url: str | None = None  # the operator's report endpoint; None: no reporting env, no token
    report_audience: str = "railyard.dev"
    report_ca: str | None = None  # PEM of the CA the endpoint's certificate chains to
    token_seconds: int = 3600  # kubelet refreshes a projected token at 80 % of its life


def service_name(job_name: str) -> str:
    return job_name


def owner_reference(job: Job) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": job.name, "uid": job.uid,
            "controller": True, "blockOwnerDeletion": True}


def selector(job_name: str) -> str:
    return f"{LABEL_JOB}={job_name}"


def pod_labels(job: Job) -> dict[str, str]:
    """The labels every replica pod carries (the rank-independent part)."""
    return job_pod_labels(job.name, (job.body.get("spec") or {}).get("template") or {})


def placement_status(placement: Placement, job_name: str, placement_id: str, serial: int = 0,
                     desired_replicas: int | None = None, priority: int | None = None,
                     adopted: Sequence[tuple[str, str]] | None = None,
                     kept: Mapping[int, str] | None = None) -> PlacementStatus:
    """`adopted`: an adopted gang's pods (name, uid) by rank, their owner's names instead of Railyard's. `kept`: the
    pods an in-place restart keeps, by rank (the other ranks' pods are named for this placement)."""
    kept = kept or {}
    return PlacementStatus(
        id=placement_id, serial=serial,
        ranks=[RankPlacement(rank=r.rank, node=r.node, gpus=list(r.gpus),
                             pod=adopted[r.rank][0] if adopted else kept.get(r.rank) or
                             pod_name(job_name, r.rank, serial),
                             pod_uid=adopted[r.rank][1] if adopted else None)
               for r in placement.replicas],
        tors=placement.tors, leaves=placement.leaves, spines=placement.spines,
        domains=[DomainCount(level=level, count=count) for level, count in placement.domains],
        rail_aligned=placement.rail_aligned, desired_replicas=desired_replicas, priority=priority,
    )


def attempt_env(job: Job) -> dict[str, str | None]:
    """What differs from one attempt of the gang to the next, for every rank: a pod's environment when it is
    created, and what an in-place restart hands a kept pod's supervisor (None: the variable is unset)."""
    restarts = job.restart_count
    last_restart = job.status.last_restart
    env: dict[str, str | None] = {
        "RAILYARD_RESTART_COUNT": str(restarts),
        "RAILYARD_RESTART_REASON": (last_restart.reason if last_restart is not None else None) or "",
        "TORCHELASTIC_RESTART_COUNT": str(restarts),  # what torchrun-style scripts read
        "RAILYARD_PREV_WORLD_SIZE": None, "RAILYARD_RESUME_STEP": None, "RAILYARD_RESUME_CHECKPOINT": None,
    }
    if restarts and last_restart is not None and last_restart.previous_replicas:
        env["RAILYARD_PREV_WORLD_SIZE"] = str(last_restart.previous_replicas)
    # Resume from what was committed when the restart was decided (recorded with it, so every rank
    # of an attempt gets the same step even if the operator rebuilt the pods later).
    if restarts and last_restart is not None and last_restart.resume_step is not None:
        env["RAILYARD_RESUME_STEP"] = str(last_restart.resume_step)
        env["RAILYARD_RESUME_CHECKPOINT"] = last_restart.resume_checkpoint or ""
    return env


def build_env(job: Job, rank: int, world: int, gpus: int, rail_aligned: bool,
              options: PodOptions) -> list[dict[str, Any]]:
    """The launcher environment torchrun and training-operator users expect, plus railyard.worker's
    contract (railyard.worker.context reads it)."""
    name, namespace = job.name, job.namespace
    master = f"{pod_name(name, 0)}.{service_name(name)}.{namespace}.svc"
    env: dict[str, Any] = {
        "RANK": rank, "NODE_RANK": rank, "WORLD_SIZE": world,
        "MASTER_ADDR": master, "MASTER_PORT": options.master_port,
        "PET_NNODES": world, "PET_NODE_RANK": rank, "PET_NPROC_PER_NODE": max(1, gpus),
        "PET_MASTER_ADDR": master, "PET_MASTER_PORT": options.master_port,
        # The pod's rank and the gang's size again: torchrun overwrites RANK/WORLD_SIZE for its workers.
        "RAILYARD_RANK": rank, "RAILYARD_REPLICAS": world,
        "RAILYARD_JOB_NAME": name, "RAILYARD_NAMESPACE": namespace,
        **{k: v for k, v in attempt_env(job).items() if v is not None},
    }
    spec = job.body["spec"]
    low, high = spec.get("minReplicas") or spec["replicas"], spec.get("maxReplicas") or spec["replicas"]
    if low != high:  # an elastic job: torchrun's elastic rendezvous accepts any size in the range
        env["PET_NNODES"] = f"{low}:{high}"
    checkpoint = spec.get("checkpoint") or {}
    if checkpoint.get("saveOnFault"):
        # The layout the operator's shard cover uses (decide/fault_save.py): a rank names the shards it saves
        # and the new attempt's ranks find theirs by coordinate (railyard.worker.Context.shard).
        parallelism = spec.get("parallelism") or {}
        env["RAILYARD_TENSOR_PARALLEL"] = parallelism.get("tensor") or 1
        env["RAILYARD_PIPELINE_PARALLEL"] = parallelism.get("pipeline") or 1
        env["RAILYARD_GPUS_PER_REPLICA"] = gpus
    if checkpoint.get("path"):
        env["RAILYARD_CHECKPOINT_PATH"] = checkpoint["path"]
    if checkpoint.get("intervalSeconds"):
        env["RAILYARD_CHECKPOINT_INTERVAL_SECONDS"] = checkpoint["intervalSeconds"]
    if options.report_url:
        env["RAILYARD_REPORT_URL"] = options.report_url
        env["RAILYARD_TOKEN_FILE"] = f"{TOKEN_DIR}/token"
        if options.report_ca:
            env["RAILYARD_REPORT_CA"] = options.report_ca
    if rail_aligned:
        env["NCCL_CROSS_NIC"] = 0  # keep each ring on its rail: the placement made that possible
    return [{"name": k, "value": str(v)} for k, v in env.items()]


def build_pod(job: Job, rank: int, node: str, gpus: list[int], world: int, rail_aligned: bool,
              placement_id: str, options: PodOptions, name: str | None = None,
              devices: NodeDevices | None = None) -> dict[str, Any]:
    """One gated replica pod pinned to its node; kube-scheduler binds it once the gate is removed.
    `name`: the pod's name as the placement records it (by default the first placement's).
    `devices`: the node's devices as DRA publishes them: the pod takes its GPUs (`gpus`, in rail
    order) through its ResourceClaim (decide/resource_claims.py) instead of the device plugin."""
    template = copy.deepcopy(job.body["spec"].get("template") or {})
    tmeta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    restarts = job.restart_count
    name = name or pod_name(job.name, rank)
    labels = {**pod_labels(job), LABEL_RANK: str(rank), LABEL_RESTART: str(restarts)}
    annotations = {**(tmeta.get("annotations") or {}), ANNOTATION_GPUS: ",".join(map(str, gpus)),
                   ANNOTATION_PLACEMENT_ID: placement_id}
    env = build_env(job, rank, world, len(gpus), rail_aligned, options)
    if devices is not None:
        env += [{"name": k, "value": v} for k, v in device_env(gpus, devices).items()]
        use_claim(spec, name)
    names = {e["name"] for e in env}
    for container in spec.get("containers") or []:
        # The placement's env wins over the template's for the same variable.
        container["env"] = [e for e in container.get("env") or [] if e.get("name") not in names] + env
    if options.report_url:
        _mount_token(spec, options)
    pin_to(spec, node)
    spec["schedulingGates"] = [*(spec.get("schedulingGates") or []), {"name": SCHEDULING_GATE}]
    spec["hostname"] = pod_name(job.name, rank)  # stable across attempts: MASTER_ADDR names rank 0
    spec["subdomain"] = service_name(job.name)
    spec.setdefault("restartPolicy", "Never")
    if job.priority_class_name:  # the Priority admission plugin fills spec.priority from it
        spec["priorityClassName"] = job.priority_class_name
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": job.namespace, "labels": labels, "annotations": annotations,
                     "ownerReferences": [owner_reference(job)]},
        "spec": spec,
    }


def _mount_token(spec: dict[str, Any], options: PodOptions) -> None:
    """A projected service-account token for the report endpoint: audience-bound (useless against
    the API server) and bound to this pod (invalid once the pod is gone, so a stale attempt's
    reports are refused at authentication)."""
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != TOKEN_VOLUME] + [{
        "name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": {
            "audience": options.report_audience, "expirationSeconds": options.token_seconds, "path": "token"}}]}}]
    mount = {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}
    for container in spec.get("containers") or []:
        container["volumeMounts"] = [m for m in container.get("volumeMounts") or []
                                     if m.get("name") != TOKEN_VOLUME] + [mount]


def pin_to(spec: dict[str, Any], node: str) -> None:
    """Pin to the node by its name (node affinity on the field metadata.name): the hostname label can
    differ from the node name on some clouds. Added to every required term, so the template's own
    node affinity still holds (terms are ORed, expressions inside a term ANDed)."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = spec["affinity"] = spec.get("affinity") or {}  # an explicit null is no affinity
    node_affinity = affinity["nodeAffinity"] = affinity.get("nodeAffinity") or {}
    required = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = \
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [{**t, "matchFields": [*(t.get("matchFields") or []), pin]} for t in terms]


RENDEZVOUS_PORT = 29500


def build_service(job: Job) -> dict[str, Any]:
    """Headless Service giving every replica a stable DNS name (rank 0 is the rendezvous point).
    Without a selector: its EndpointSlice is the operator's (decide/rank_addresses.py), written once a
    gang's ranks have their IPs instead of by kube-controller-manager as each pod changes."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service_name(job.name), "namespace": job.namespace,
                     "labels": {LABEL_JOB: job.name}, "ownerReferences": [owner_reference(job)]},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "targetPort": RENDEZVOUS_PORT}]},
    }


def event_name(job: Job, reason: str, key: str) -> str:
    """One Event object per (job, reason, stable key): repeats bump its count, as kube's
    EventCorrelator aggregates, instead of creating a new object each time."""
    digest = hashlib.sha1(f"{job.uid}/{reason}/{key}".encode()).hexdigest()[:12]
    return f"{job.name[:200]}.{digest}"


def build_event(job: Job, type_: str, reason: str, message: str, now: str, key: str = "",
                count: int = 1, first: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": event_name(job, reason, key or message), "namespace": job.namespace},
        "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": job.name,
                           "namespace": job.namespace, "uid": job.uid or None},
        "type": type_, "reason": reason, "message": message[:1024],
        "firstTimestamp": first or now, "lastTimestamp": now, "count": count,
        "source": {"component": "railyard-operator"}, "reportingComponent": "railyard-operator",
    }

