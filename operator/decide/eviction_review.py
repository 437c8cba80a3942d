"""The eviction webhook's AdmissionReview (admission.k8s.io/v1, CREATE pods/eviction): what it asks and the
answer. An eviction of a running gang's rank on a node being drained (cordoned, or tainted by an autoscaler) is
held — denied with 429 Too Many Requests, which `kubectl drain` and autoscalers retry — while the gang saves a
step and moves its ranks off the node, at most RAILYARD_MAINTENANCE_CHECKPOINT_SECONDS from the first ask;
every other eviction is allowed. The webhook fails open (the chart's failurePolicy: Ignore): with the operator
down or uninstalled nothing is held and every drain completes (the gangs restart as after any disruption)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from railyard.operator.base.objects import Job, PodView
from railyard.topology.cluster.faults import NodeHealth
from railyard.topology.cluster.pod_trust import carried_pod_names

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


@dataclass(frozen=True)
class Verdict:
    """Hold the eviction (429: retry) or allow it; `message` is what the evicting client is told."""

    held: bool
    message: str | None = None


# kubectl drain cordons, then evicts at once: the operator's watch may not have shown the cordon yet. An
# eviction of a rank on a node not (yet) seen draining is held this long before it is taken for one that is not
# a drain (a descheduler, a manual eviction) and allowed.
NOT_YET_DRAINING_SECONDS = 10.0


def judge(pod: PodView | None, job: Job | None, health: NodeHealth | None, reports: bool, asked_for: float,
          hold_seconds: float) -> Verdict:
    """Whether to hold an eviction of `pod` (`asked_for`: seconds since its first ask). Held only for a rank of
    a gang's current placement whose ranks report (so they can save a step first: `reports`, see
    decide/checkpoint_wait.nobody_reports for a new leader's), while its node is being drained, at most
    `hold_seconds`; a node not seen draining holds it NOT_YET_DRAINING_SECONDS (the cordon may be on its way).
    Then it is allowed and the gang restarts without that save."""
    if pod is None or job is None or job.finished or job.placement is None or not _of_placement(pod, job):
        return Verdict(False)
    node = pod.node_name or ""
    name = f"{job.namespace}/{job.name}"
    if not reports:
        return Verdict(False, f"railyard: {name} reports no progress, so it cannot save a step first; it restarts "
                              f"without {node}")
    if health is None or not health.draining:
        if asked_for < NOT_YET_DRAINING_SECONDS:
            return Verdict(True, f"railyard: {name} has a rank on {node}; waiting to see the node drained "
                                 f"(retry)")
        return Verdict(False)
    if asked_for >= hold_seconds:
        return Verdict(False, f"railyard: {name} did not move off {node} within {hold_seconds:.0f}s "
                              "(RAILYARD_MAINTENANCE_CHECKPOINT_SECONDS); evicted now, it restarts from its last "
                              "checkpoint")
    return Verdict(True, f"railyard: {name} saves a checkpoint and moves its ranks off {node}; retry (held at most "
                         f"{hold_seconds - asked_for:.0f}s more)")


def _of_placement(pod: PodView, job: Job) -> bool:
    """A pod of the job's current placement: made for it, or kept into it by an in-place restart (not relabelled
    yet, it is the placement's all the same: a drain must not take it without its save)."""
    placement = job.placement
    return placement is not None and (pod.placement_id == placement.id or
                                      pod.name in carried_pod_names(job.name, placement))


def answer(uid: str, verdict: Verdict) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": not verdict.held}
    if verdict.held:
        # 429: kubectl drain, Karpenter and Cluster Autoscaler retry it, as they retry a disruption budget's.
        response["status"] = {"code": 429, "reason": "TooManyRequests", "message": verdict.message or ""}
    elif verdict.message:
        response["warnings"] = [verdict.message[:500]]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
