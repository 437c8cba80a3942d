"""The pod webhook of workloads Railyard places without owning them (JobSet, LeaderWorkerSet, Kubeflow TrainJob,
indexed Jobs, pod groups): a pod created with the opt-in label `railyard.dev/scheduling: gang` gets Railyard's
scheduling gate, so kube-scheduler leaves it alone until Railyard has placed its whole group (then Railyard pins
it to its node and removes the gate). A template that carries the gate itself needs no webhook. Pure: the endpoint
(kube/report_server.py) hands the AdmissionReview in and sends the answer back."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from railyard.operator.base.keys import SCHEDULING_GATE

PATH = "/v1/gang-pods"
OPT_IN_LABEL = "railyard.dev/scheduling"
OPT_IN_VALUE = "gang"


@dataclass(frozen=True)
class PodCreation:
    uid: str
    namespace: str
    pod: dict[str, Any]


def parse_review(body: Any) -> PodCreation:
    """Raises ValueError naming what is missing."""
    if not isinstance(body, dict) or body.get("kind") != "AdmissionReview":
        raise ValueError("not an AdmissionReview")
    request = body.get("request")
    if not isinstance(request, dict):
        raise ValueError("AdmissionReview without request")
    uid, obj = request.get("uid"), request.get("object")
    if not (isinstance(uid, str) and uid and isinstance(obj, dict) and obj.get("kind") == "Pod"):
        raise ValueError("request.uid and request.object (a Pod) are required")
    if request.get("operation") not in (None, "CREATE"):
        raise ValueError(f"request.operation {request.get('operation')!r} is not CREATE")
    return PodCreation(uid, str(request.get("namespace") or ""), obj)


def opted_in(pod: dict[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(OPT_IN_LABEL) == OPT_IN_VALUE


def gate_patch(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSONPatch that adds Railyard's gate (nothing when the pod is not opted in, or has it already)."""
    if not opted_in(pod):
        return []
    gates = (pod.get("spec") or {}).get("schedulingGates")
    if any(g.get("name") == SCHEDULING_GATE for g in gates or []):
        return []
    if gates is None:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": SCHEDULING_GATE}]}]
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": SCHEDULING_GATE}}]


def answer(uid: str, patch: list[dict[str, Any]]) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
