"""The operator's view of the cluster, fed by watch events (never a list call per decision).

Pods are kept slim (only what placement and job status need) so 20k pods stay cheap; node models
are parsed once per node change, not per decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from railyard.operator.labels import ANNOTATION_GPUS, ANNOTATION_PLACEMENT_ID, LABEL_JOB, LABEL_RANK
from railyard.topology.labels import GPU_RESOURCE, NATIVE, LabelScheme
from railyard.topology.model import Exclusion, GpuNode, Snapshot
from railyard.topology.nodes import NodeError, node_from_object, used_gpus

Key = tuple[str, str]


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    containers = [
        {"resources": {"limits": {GPU_RESOURCE: ((c.get("resources") or {}).get("limits") or {})[GPU_RESOURCE]}}}
        for c in spec.get("containers") or []
        if GPU_RESOURCE in ((c.get("resources") or {}).get("limits") or {})
    ]
    return {
        "metadata": {
            "name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "labels": {k: v for k, v in labels.items() if k in (LABEL_JOB, LABEL_RANK)},
            "annotations": {k: v for k, v in annotations.items() if k in (ANNOTATION_GPUS, ANNOTATION_PLACEMENT_ID)},
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "nodeSelector": {k: v for k, v in (spec.get("nodeSelector") or {}).items()
                             if k == "kubernetes.io/hostname"},
            "schedulingGates": spec.get("schedulingGates") or [],
            "containers": containers,
        },
        "status": {
            "phase": status.get("phase"),
            "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "message")}
                           for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"],
            "terminated": _termination(status),
        },
    }


def _termination(status: Mapping[str, Any]) -> str | None:
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("exitCode", 0) != 0:
            return f"container {cs.get('name')} exited {term.get('exitCode')}: {term.get('reason') or ''} " \
                   f"{term.get('message') or ''}".strip()
    return status.get("reason") or status.get("message")


class ClusterState:
    def __init__(self, scheme: LabelScheme = NATIVE) -> None:
        self.scheme = scheme
        self.nodes: dict[str, GpuNode] = {}
        self.excluded: dict[str, Exclusion] = {}
        self.pods: dict[Key, dict[str, Any]] = {}
        self.jobs: dict[Key, dict[str, Any]] = {}
        self._pods_by_job: dict[Key, set[Key]] = {}

    # --- events ---------------------------------------------------------------------------------

    def apply_node(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        self.nodes.pop(name, None)
        self.excluded.pop(name, None)
        if event_type == "DELETED":
            return
        try:
            self.nodes[name] = node_from_object(body, self.scheme)
        except NodeError as e:
            self.excluded[name] = Exclusion(name, str(e))

    def apply_pod(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        if event_type == "DELETED":
            self.pods.pop(key, None)
            if job:
                self._pods_by_job.get((meta["namespace"], job), set()).discard(key)
            return
        self.pods[key] = slim_pod(body)
        if job:
            self._pods_by_job.setdefault((meta["namespace"], job), set()).add(key)

    def apply_job(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        if event_type == "DELETED":
            self.jobs.pop(key, None)
            return
        current = self.jobs.get(key)
        if current is not None and _older(meta.get("resourceVersion"), current["metadata"].get("resourceVersion")):
            return  # a late watch event must not undo the status the placer just wrote
        self.jobs[key] = _plain(body)

    # --- queries --------------------------------------------------------------------------------

    def job_pods(self, key: Key) -> list[dict[str, Any]]:
        return [self.pods[k] for k in sorted(self._pods_by_job.get(key, ())) if k in self.pods]

    def reservations(self) -> Iterable[dict[str, Any]]:
        return placement_reservations(self.jobs.values())

    def snapshot(self) -> Snapshot:
        nodes = tuple(sorted(self.nodes.values(), key=lambda n: n.name))
        by_name = {n.name: n for n in nodes}
        used = used_gpus(by_name, [*self.pods.values(), *self.reservations()])
        return Snapshot(nodes, used, tuple(sorted(self.excluded.values(), key=lambda e: e.node)))


def placement_reservations(jobs: Iterable[Mapping[str, Any]]) -> Iterable[dict[str, Any]]:
    """Recorded placements of live jobs, as pseudo-pods: a placement holds its GPUs from the moment
    it is written to status, before (and whether or not) its pods exist."""
    for job in jobs:
        status = job.get("status") or {}
        placement = status.get("placement") or {}
        if not placement.get("ranks") or _finished(status):
            continue
        for rank in placement["ranks"]:
            yield {"metadata": {"annotations": {ANNOTATION_GPUS: ",".join(map(str, rank["gpus"]))}},
                   "spec": {"nodeName": rank["node"]}, "status": {"phase": "Pending"}}


def _older(candidate: str | None, current: str | None) -> bool:
    """resourceVersions are etcd revisions in practice; compare numerically when both are numbers."""
    try:
        return int(candidate or "") < int(current or "")
    except ValueError:
        return False


def _finished(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
               for c in status.get("conditions") or [])


def _plain(value: Any) -> Any:
    """Kopf bodies are read-only views; keep plain dicts."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
