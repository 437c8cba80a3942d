"""An in-memory stand-in for the operator's KubeApi, for unit and property tests of the state +
decision core only (e2e tests always use the real API server).

It keeps objects with etcd-like resourceVersions and records every change as a watch event, so a
test decides when (and whether, and in which order) the operator's state sees each event.
"""

from __future__ import annotations

import copy
import itertools
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from railyard.operator.base.keys import SCHEDULING_GATE
from railyard.operator.kube.client import ApiException, Fenced
from railyard.operator.kube.protocol import ClusterApi

Event = tuple[str, str, dict[str, Any]]  # (kind, type, object)


class FakeApi:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self._rv = itertools.count(100)
        self._ips = itertools.count(0)
        self.revision = 99
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {"nodes": {}, "pods": {}, "trainingjobs": {},
                                                                          "services": {}, "priorityclasses": {},
                                                                          "poddisruptionbudgets": {},
                                                                          "resourceslices": {}, "resourceclaims": {},
                                                                          "endpointslices": {}}
        self.log: list[Event] = []
        self.posted_events: list[dict[str, Any]] = []
        self.writes: list[tuple[str, str]] = []
        self.deletions: list[tuple[str, int | None]] = []  # (pod, gracePeriodSeconds asked for)
        self.owners: dict[str, dict[str, Any]] = {}  # API path -> object: the workloads read by path (JobSets, Jobs)
        self.reads: list[str] = []
        self.refuse_pods: ApiException | None = None  # set: every pod create is refused with it (a quota)
        self.refuse_status: dict[str, ApiException] = {}  # job name -> the error its status writes get
        self.graceful = False  # set: a graceful pod delete leaves the pod Terminating (a real kubelet's time)
        self.fence: Callable[[], bool] | None = None
        self.gc_claims = True  # a deleted pod's ResourceClaims (owned by it) go with it, as the garbage collector does
        for node in nodes:
            self._store("nodes", copy.deepcopy(node), "ADDED")

    # --- bookkeeping -----------------------------------------------------------------------------

    @property
    def rv(self) -> int:
        """The store's current revision (what a list returns as its resourceVersion)."""
        return self.revision

    def _key(self, obj: dict[str, Any]) -> tuple[str, str]:
        return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    def _next(self) -> str:
        self.revision = next(self._rv)
        return str(self.revision)

    def _store(self, kind: str, obj: dict[str, Any], event: str) -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = self._next()
        obj["metadata"].setdefault("uid", uuid.uuid4().hex)
        self.objects[kind][self._key(obj)] = obj
        if kind not in ("services", "poddisruptionbudgets", "endpointslices"):  # not watched by the operator
            self.log.append((kind, event, copy.deepcopy(obj)))
        return copy.deepcopy(obj)

    def _remove(self, kind: str, key: tuple[str, str]) -> None:
        obj = self.objects[kind].pop(key)
        obj["metadata"]["resourceVersion"] = self._next()
        self.log.append((kind, "DELETED", copy.deepcopy(obj)))
        if kind == "pods" and self.gc_claims:
            uid = obj["metadata"]["uid"]
            for claim_key, claim in list(self.objects["resourceclaims"].items()):
                if any(o.get("uid") == uid for o in claim["metadata"].get("ownerReferences") or []):
                    self._remove("resourceclaims", claim_key)

    def _write(self, verb: str, what: str) -> None:
        if self.fence is not None and not self.fence():
            raise Fenced(f"{verb} {what}")
        self.writes.append((verb, what))

    def listing(self, kind: str) -> tuple[list[dict[str, Any]], int]:
        return [copy.deepcopy(o) for o in self.objects[kind].values()], self.rv

    # --- what users and kube-scheduler do ---------------------------------------------------------

    def create_job(self, body: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(body)
        body["metadata"].setdefault("namespace", "default")
        body["metadata"].setdefault("generation", 1)
        body["metadata"].setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        return self._store("trainingjobs", body, "ADDED")

    def delete_job(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        if key not in self.objects["trainingjobs"]:
            return
        uid = self.objects["trainingjobs"][key]["metadata"]["uid"]
        self._remove("trainingjobs", key)
        for pkey, pod in list(self.objects["pods"].items()):  # the garbage collector
            if any(o.get("uid") == uid for o in pod["metadata"].get("ownerReferences") or []):
                self._remove("pods", pkey)

    def bind_released(self, may_bind: Callable[[dict[str, Any]], bool] | None = None) -> int:
        """kube-scheduler: bind every ungated, unbound pod to its pinned node (those `may_bind` allows)."""
        from railyard.topology.cluster.nodes import pinned_node

        bound = 0
        for pod in list(self.objects["pods"].values()):
            if pod["spec"].get("schedulingGates") or pod["spec"].get("nodeName"):
                continue
            if pod["metadata"].get("deletionTimestamp") or (may_bind is not None and not may_bind(pod)):
                continue
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = pinned_node(pod["spec"])
            pod.setdefault("status", {})["phase"] = "Running"
            ip = next(self._ips)
            pod["status"]["podIP"] = f"10.0.{ip // 250}.{ip % 250 + 1}"  # as kwok and kubelets give one
            self._store("pods", pod, "MODIFIED")
            bound += 1
        return bound

    # --- the KubeApi surface the placer uses -------------------------------------------------------

    async def patch_job_status(self, namespace: str, name: str, status: dict[str, Any],
                               resource_version: str | None = None) -> dict[str, Any] | None:
        self._write("PATCH", f"trainingjobs/{name}/status")
        if name in self.refuse_status:
            raise self.refuse_status[name]
        job = self.objects["trainingjobs"].get((namespace, name))
        if job is None:
            return None
        if resource_version and resource_version != job["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        job = copy.deepcopy(job)
        job["status"] = merge_patch(job.get("status") or {}, status)
        return self._store("trainingjobs", job, "MODIFIED")

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        job = self.objects["trainingjobs"].get((namespace, name))
        return copy.deepcopy(job) if job else None

    async def create(self, plural: str, body: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        self._write("POST", plural)
        if plural == "pods" and self.refuse_pods is not None:
            raise self.refuse_pods
        key = self._key(body)
        if key in self.objects[plural]:
            return False, copy.deepcopy(self.objects[plural][key])
        if plural == "trainingjobs":  # as the API server fills in a new object's metadata
            return True, self.create_job(body)
        return True, self._store(plural, copy.deepcopy(body), "ADDED")

    async def create_dry_run(self, plural: str, body: dict[str, Any]) -> None:
        self._write("POST", f"{plural}?dryRun")
        if plural == "pods" and self.refuse_pods is not None:
            raise self.refuse_pods

    async def replace(self, plural: str, body: dict[str, Any]) -> dict[str, Any] | None:
        self._write("PUT", plural)
        key = self._key(body)
        if key not in self.objects[plural]:
            return None
        return self._store(plural, copy.deepcopy(body), "MODIFIED")

    async def read(self, path: str) -> dict[str, Any] | None:
        self.reads.append(path)
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "pods":
            found = self.objects["pods"].get((parts[3], parts[5]))
        else:
            found = self.owners.get(path)
        return copy.deepcopy(found) if found is not None else None

    async def patch_pod(self, namespace: str, name: str, uid: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        self._write("PATCH", f"pods/{name}")
        pod = self.objects["pods"].get((namespace, name))
        if pod is None or pod["metadata"]["uid"] != uid:
            return None
        return self._store("pods", _merge(copy.deepcopy(pod), patch), "MODIFIED")

    async def release_pod(self, namespace: str, name: str, gate_index: int) -> dict[str, Any] | None:
        self._write("PATCH", f"pods/{name}")
        pod = copy.deepcopy(self.objects["pods"][(namespace, name)])
        pod["spec"]["schedulingGates"] = [g for g in pod["spec"].get("schedulingGates") or []
                                          if g.get("name") != SCHEDULING_GATE]
        return self._store("pods", pod, "MODIFIED")

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None,
                         grace_seconds: int | None = None) -> None:
        self._write("DELETE", f"pods/{name}")
        self.deletions.append((name, grace_seconds))
        pod = self.objects["pods"].get((namespace, name))
        if pod is None or (uid is not None and pod["metadata"]["uid"] != uid):
            return
        # The API server deletes a pod no kubelet runs (never bound) at once, whatever the grace.
        if self.graceful and grace_seconds != 0 and pod["spec"].get("nodeName"):
            if not pod["metadata"].get("deletionTimestamp"):
                pod = copy.deepcopy(pod)
                pod["metadata"]["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self._store("pods", pod, "MODIFIED")
            return
        self._remove("pods", (namespace, name))

    def finish_terminating(self) -> int:
        """The kubelets are done: every Terminating pod is gone."""
        gone = [k for k, p in self.objects["pods"].items() if p["metadata"].get("deletionTimestamp")]
        for key in gone:
            self._remove("pods", key)
        return len(gone)

    def evict(self, namespace: str, name: str) -> None:
        """The Eviction API (kubectl drain): DisruptionTarget on the pod, then it is deleted."""
        pod = copy.deepcopy(self.objects["pods"][(namespace, name)])
        pod.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
             "message": "Eviction API: evicting"})
        self._store("pods", pod, "MODIFIED")
        self._remove("pods", (namespace, name))

    async def taint_node(self, name: str, taint: dict[str, str], annotations: dict[str, str] | None = None) -> bool:
        self._write("PATCH", f"nodes/{name}")
        node = self.objects["nodes"].get(("", name))
        if node is None:
            return False
        node = copy.deepcopy(node)
        taints = node.setdefault("spec", {}).setdefault("taints", [])
        if not any(t["key"] == taint["key"] for t in taints):
            taints.append(dict(taint))
            node["metadata"].setdefault("annotations", {}).update(annotations or {})
            self._store("nodes", node, "MODIFIED")
        return True

    async def lift_quarantine(self, name: str, taint_key: str, annotations: Sequence[str]) -> bool:
        self._write("PATCH", f"nodes/{name}")
        node = self.objects["nodes"].get(("", name))
        if node is None:
            return False
        node = copy.deepcopy(node)
        node["spec"]["taints"] = [t for t in node["spec"].get("taints") or [] if t["key"] != taint_key]
        for annotation in annotations:
            (node["metadata"].get("annotations") or {}).pop(annotation, None)
        self._store("nodes", node, "MODIFIED")
        return True

    async def post_event(self, event: dict[str, Any], existing: bool = False) -> None:
        self.posted_events.append(event)


def merge_patch(target: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386), as the API server applies application/merge-patch+json:
    objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _conforms(api: FakeApi) -> ClusterApi:
    """mypy checks here that the fake offers what the actors call (kube/protocol.ClusterApi)."""
    return api


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target
