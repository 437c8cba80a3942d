"""The eviction webhook's AdmissionReview (admission.k8s.io/v1, CREATE pods/eviction): what it asks
and the answer. The answer always allows: the gang's PodDisruptionBudget is what makes a drain wait
(and still does when the webhook is down); the webhook only tells the operator a drain has begun, and
tells the admin, in a warning kubectl prints, what happens next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PATH = "/v1/evictions"


@dataclass(frozen=True)
class EvictionAsk:
    uid: str
    namespace: str
    pod: str
    dry_run: bool


def parse_review(body: Any) -> EvictionAsk:
    """Raises ValueError naming what is missing."""
    if not isinstance(body, dict) or body.get("kind") != "AdmissionReview":
        raise ValueError("not an AdmissionReview")
    request = body.get("request")
    if not isinstance(request, dict):
        raise ValueError("AdmissionReview without request")
    uid, namespace, name = request.get("uid"), request.get("namespace"), request.get("name")
    if not (isinstance(uid, str) and uid and isinstance(namespace, str) and namespace and isinstance(name, str)
            and name):
        raise ValueError("request.uid, request.namespace and request.name are required")
    if request.get("subResource") not in (None, "eviction"):
        raise ValueError(f"request.subResource {request.get('subResource')!r} is not eviction")
    return EvictionAsk(uid, namespace, name, bool(request.get("dryRun")))


def allow(uid: str, warning: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if warning:
        response["warnings"] = [warning[:500]]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def drain_warning(namespace: str, job: str, node: str) -> str:
    return (f"railyard: {namespace}/{job} saves a checkpoint and moves its ranks off {node}; its disruption budget "
            "holds this eviction until then (kubectl drain retries)")
