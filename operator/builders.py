"""Pure builders of the objects the operator creates (dask-kubernetes style `build_*` functions).

Nothing here does I/O: a TrainingJob body and a placement in, plain dicts out.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

from railyard.operator.keys import (
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT_ID,
    LABEL_JOB,
    LABEL_POD_GROUP,
    LABEL_RANK,
    LABEL_RESTART,
    SCHEDULING_GATE,
)
from railyard.topology.api import API_VERSION, KIND
from railyard.topology.solver import Placement

MAX_NAME = 63
TOKEN_VOLUME = "railyard-token"
TOKEN_DIR = "/var/run/secrets/railyard.dev"  # railyard.worker's default token file is TOKEN_DIR/token


@dataclass(frozen=True)
class PodOptions:
    """Operator-wide settings every replica pod reflects."""

    master_port: int = 29500
    report_url: str | None = None  # the operator's report endpoint; None: no reporting env, no token
    report_audience: str = "railyard.dev"
    token_seconds: int = 3600  # kubelet refreshes a projected token at 80 % of its life


def pod_name(job_name: str, rank: int, generation: int = 0) -> str:
    """`<job>-<rank>`; from the first restart on `<job>-g<generation>-<rank>`, so a pod stuck
    Terminating on a lost node never blocks its successor's name. The hostname stays `<job>-<rank>`."""
    return f"{job_name}-{rank}" if generation == 0 else f"{job_name}-g{generation}-{rank}"


def service_name(job_name: str) -> str:
    return job_name


def owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def selector(job_name: str) -> str:
    return f"{LABEL_JOB}={job_name}"


def pod_labels(job: dict[str, Any]) -> dict[str, str]:
    """The labels every replica pod carries (the rank-independent part)."""
    name = job["metadata"]["name"]
    template_labels = ((job["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
    return {**template_labels, LABEL_JOB: name, LABEL_POD_GROUP: name}


def placement_status(placement: Placement, job_name: str, placement_id: str, generation: int = 0) -> dict[str, Any]:
    return {
        "id": placement_id,
        "ranks": [{"rank": r.rank, "node": r.node, "gpus": list(r.gpus), "pod": pod_name(job_name, r.rank, generation)}
                  for r in placement.replicas],
        "tors": placement.tors, "leaves": placement.leaves, "spines": placement.spines,
        "domains": [{"level": level, "count": count} for level, count in placement.domains],
        "railAligned": placement.rail_aligned,
    }


def build_env(job: dict[str, Any], rank: int, world: int, gpus: int, rail_aligned: bool,
              options: PodOptions) -> list[dict[str, Any]]:
    """The launcher environment torchrun and training-operator users expect, plus railyard.worker's
    contract (railyard.worker.context reads it)."""
    meta = job["metadata"]
    status = job.get("status") or {}
    master = f"{pod_name(meta['name'], 0)}.{service_name(meta['name'])}.{meta['namespace']}.svc"
    restarts = status.get("restartCount", 0)
    last_restart = status.get("lastRestart") or {}
    env: dict[str, Any] = {
        "RANK": rank, "NODE_RANK": rank, "WORLD_SIZE": world,
        "MASTER_ADDR": master, "MASTER_PORT": options.master_port,
        "PET_NNODES": world, "PET_NODE_RANK": rank, "PET_NPROC_PER_NODE": max(1, gpus),
        "PET_MASTER_ADDR": master, "PET_MASTER_PORT": options.master_port,
        # The pod's rank and the gang's size again: torchrun overwrites RANK/WORLD_SIZE for its workers.
        "RAILYARD_RANK": rank, "RAILYARD_REPLICAS": world,
        "RAILYARD_JOB_NAME": meta["name"], "RAILYARD_NAMESPACE": meta["namespace"],
        "RAILYARD_RESTART_COUNT": restarts, "RAILYARD_RESTART_REASON": last_restart.get("reason", ""),
        "TORCHELASTIC_RESTART_COUNT": restarts,  # what torchrun-style scripts read
    }
    # Resume from what was committed when the restart was decided (recorded with it, so every rank
    # of a generation gets the same step even if the operator rebuilt the pods later).
    if restarts and last_restart.get("previousReplicas"):
        env["RAILYARD_PREV_WORLD_SIZE"] = last_restart["previousReplicas"]
    spec = job["spec"]
    low, high = spec.get("minReplicas") or spec["replicas"], spec.get("maxReplicas") or spec["replicas"]
    if low != high:  # an elastic job: torchrun's elastic rendezvous accepts any size in the range
        env["PET_NNODES"] = f"{low}:{high}"
    if restarts and last_restart.get("resumeStep") is not None:
        env["RAILYARD_RESUME_STEP"] = last_restart["resumeStep"]
        env["RAILYARD_RESUME_CHECKPOINT"] = last_restart.get("resumeCheckpoint") or ""
    checkpoint = job["spec"].get("checkpoint") or {}
    if checkpoint.get("path"):
        env["RAILYARD_CHECKPOINT_PATH"] = checkpoint["path"]
    if checkpoint.get("intervalSeconds"):
        env["RAILYARD_CHECKPOINT_INTERVAL_SECONDS"] = checkpoint["intervalSeconds"]
    if options.report_url:
        env["RAILYARD_REPORT_URL"] = options.report_url
        env["RAILYARD_TOKEN_FILE"] = f"{TOKEN_DIR}/token"
    if rail_aligned:
        env["NCCL_CROSS_NIC"] = 0  # keep each ring on its rail: the placement made that possible
    return [{"name": k, "value": str(v)} for k, v in env.items()]


def build_pod(job: dict[str, Any], rank: int, node: str, gpus: list[int], world: int, rail_aligned: bool,
              placement_id: str, options: PodOptions) -> dict[str, Any]:
    """One gated replica pod pinned to its node; kube-scheduler binds it once the gate is removed."""
    meta = job["metadata"]
    template = copy.deepcopy(job["spec"].get("template") or {})
    tmeta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    restarts = (job.get("status") or {}).get("restartCount", 0)
    name = pod_name(meta["name"], rank, restarts)
    labels = {**pod_labels(job), LABEL_RANK: str(rank), LABEL_RESTART: str(restarts)}
    annotations = {**(tmeta.get("annotations") or {}), ANNOTATION_GPUS: ",".join(map(str, gpus)),
                   ANNOTATION_PLACEMENT_ID: placement_id}
    env = build_env(job, rank, world, len(gpus), rail_aligned, options)
    names = {e["name"] for e in env}
    for container in spec.get("containers") or []:
        # The placement's env wins over the template's for the same variable.
        container["env"] = [e for e in container.get("env") or [] if e.get("name") not in names] + env
    if options.report_url:
        _mount_token(spec, options)
    _pin(spec, node)
    spec["schedulingGates"] = [*(spec.get("schedulingGates") or []), {"name": SCHEDULING_GATE}]
    spec["hostname"] = pod_name(meta["name"], rank)  # stable across generations: MASTER_ADDR names rank 0
    spec["subdomain"] = service_name(meta["name"])
    spec.setdefault("restartPolicy", "Never")
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels, "annotations": annotations,
                     "ownerReferences": [owner_reference(job)]},
        "spec": spec,
    }


def _mount_token(spec: dict[str, Any], options: PodOptions) -> None:
    """A projected service-account token for the report endpoint: audience-bound (useless against
    the API server) and bound to this pod (invalid once the pod is gone, so a stale generation's
    reports are refused at authentication)."""
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != TOKEN_VOLUME] + [{
        "name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": {
            "audience": options.report_audience, "expirationSeconds": options.token_seconds, "path": "token"}}]}}]
    mount = {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}
    for container in spec.get("containers") or []:
        container["volumeMounts"] = [m for m in container.get("volumeMounts") or []
                                     if m.get("name") != TOKEN_VOLUME] + [mount]


def _pin(spec: dict[str, Any], node: str) -> None:
    """Pin to the node by its name (node affinity on the field metadata.name): the hostname label can
    differ from the node name on some clouds. Added to every required term, so the template's own
    node affinity still holds (terms are ORed, expressions inside a term ANDed)."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [{**t, "matchFields": [*(t.get("matchFields") or []), pin]} for t in terms]


def build_service(job: dict[str, Any]) -> dict[str, Any]:
    """Headless Service giving every replica a stable DNS name (rank 0 is the rendezvous point)."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service_name(meta["name"]), "namespace": meta["namespace"],
                     "labels": {LABEL_JOB: meta["name"]}, "ownerReferences": [owner_reference(job)]},
        "spec": {"clusterIP": "None", "selector": {LABEL_JOB: meta["name"]}, "publishNotReadyAddresses": True,
                 "ports": [{"name": "rendezvous", "port": 29500, "targetPort": 29500}]},
    }


def event_name(job: dict[str, Any], reason: str, key: str) -> str:
    """One Event object per (job, reason, stable key): repeats bump its count, as kube's
    EventCorrelator aggregates, instead of creating a new object each time."""
    meta = job["metadata"]
    digest = hashlib.sha1(f"{meta.get('uid')}/{reason}/{key}".encode()).hexdigest()[:12]
    return f"{meta['name'][:200]}.{digest}"


def build_event(job: dict[str, Any], type_: str, reason: str, message: str, now: str, key: str = "",
                count: int = 1, first: str | None = None) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": event_name(job, reason, key or message), "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta.get("uid")},
        "type": type_, "reason": reason, "message": message[:1024],
        "firstTimestamp": first or now, "lastTimestamp": now, "count": count,
        "source": {"component": "railyard-operator"}, "reportingComponent": "railyard-operator",
    }
