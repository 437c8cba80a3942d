"""A job's rank DNS names as the operator writes them: the addresses of its current placement's pods,
when they are worth a write, and the EndpointSlice that carries them for the job's selectorless
headless Service (builders.build_service). Pure: the actor is act/endpoint_slices.py.

Why the operator and not kube-controller-manager: with a selector, its Endpoints and EndpointSlice
controllers re-wrote both objects as each pod of a gang was bound and got its IP (0.98 requests per
pod in the operator burst, more than the operator's own status writes). A gang only talks once every
rank is up, so its addresses are written once all ranks have an IP, at once when one goes stale (its
pod gone, terminating or re-addressed: a rank's name must not lead to a dead pod), and after
`PARTIAL_WRITE_SECONDS` with the ranks that have one (a rank stuck pulling its image still leaves
the others resolvable, e.g. for a debug shell).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from railyard.operator.base.keys import LABEL_JOB
from railyard.operator.base.objects import Job, Key, PodView
from railyard.operator.decide.builders import RENDEZVOUS_PORT, owner_reference, service_name
from railyard.topology.api.job import PlacementStatus
from railyard.topology.cluster.pod_trust import is_carried, pod_name

PARTIAL_WRITE_SECONDS = 5.0
MANAGED_BY = "operator.railyard.dev"  # endpointslice.kubernetes.io/managed-by (a label value: no slash)
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True, order=True)
class Address:
    hostname: str  # the rank's stable hostname (`<job>-<rank>`, the pod's spec.hostname)
    ip: str
    node: str
    pod: str
    uid: str


Addresses = tuple[Address, ...]


def addresses(job: Job, placement: PlacementStatus, pods: Mapping[Key, PodView]) -> Addresses | None:
    """The current placement's pods that have an IP and are not leaving, in rank order; None when a
    rank's pod has finished: the gang is finishing or about to restart, and its next attempt's
    addresses are written then (the leftovers would be one more write per job). A rank deleted or
    Terminating is different: its name is cleared at once (a restart costs that write)."""
    out = []
    for rank in placement.ranks:
        pod = pods.get((job.namespace, rank.pod or ""))
        if pod is None or (pod.placement_id != placement.id and not is_carried(job.name, placement, rank)):
            continue
        if pod.finished:
            return None
        if pod.ip is not None and not pod.terminating:
            out.append(Address(pod_name(job.name, rank.rank), pod.ip, pod.node_name or rank.node, pod.name, pod.uid))
    return tuple(out)


def worth_writing(current: Addresses, written: Addresses | None, ranks: int, partial_for: float) -> bool:
    """Whether `current` should replace what was `written` (None: nothing yet, or not since this
    operator started): when every rank has an address, when a written one went stale, or when some
    ranks have waited `PARTIAL_WRITE_SECONDS` (`partial_for`) for the rest."""
    if current == written:
        return False
    if written is not None and not set(written) <= set(current):
        return True  # stale: a name leads to a pod that is gone, leaving, or re-addressed
    if len(current) == ranks:
        return True
    return bool(current) and partial_for >= PARTIAL_WRITE_SECONDS


def same_endpoints(stored: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether a stored slice already names the same pods at the same addresses as `body`."""
    def names(obj: Mapping[str, Any]) -> set[tuple[str, tuple[str, ...], str]]:
        return {(e.get("hostname") or "", tuple(e.get("addresses") or ()), (e.get("targetRef") or {}).get("uid") or "")
                for e in obj.get("endpoints") or []}
    return names(stored) == names(body)


MAX_ENDPOINTS = 1000  # per EndpointSlice: the API refuses more ("Too many: 1024: must have at most 1000")


def slice_count(written: Addresses | None) -> int:
    """How many slices `written` took (0: none written)."""
    return 0 if written is None else max(1, -(-len(written) // MAX_ENDPOINTS))


def endpoint_slices(job: Job, current: Addresses, at_least: int = 1) -> list[dict[str, Any]]:
    """The job's EndpointSlices: its addresses in rank order, MAX_ENDPOINTS a slice, the first named
    after its Service and the others `<service>.<i>` (a job name has no dot, so no other job's slice
    is ever named that way; `<service>-<i>` would be job `<service>-<i>`'s); `at_least` slices (as
    many as were written before), the extra ones empty, so a gang that shrank leaves no name behind."""
    family = "IPv6" if any(":" in a.ip for a in current) else "IPv4"
    chunks = [current[i:i + MAX_ENDPOINTS] for i in range(0, len(current), MAX_ENDPOINTS)] or [()]
    chunks += [()] * (at_least - len(chunks))
    return [_endpoint_slice(job, chunk, index, family) for index, chunk in enumerate(chunks)]


def _endpoint_slice(job: Job, chunk: Addresses, index: int, family: str) -> dict[str, Any]:
    """One of the job's EndpointSlices; owned by the job (collected with it). Every address is ready:
    the Service publishes not-ready addresses (a rank's name must resolve before its readiness probe
    passes, or rendezvous never starts)."""
    service = service_name(job.name)
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": service if index == 0 else f"{service}.{index}", "namespace": job.namespace,
                     "labels": {SERVICE_NAME_LABEL: service, "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
                                LABEL_JOB: job.name},
                     "ownerReferences": [owner_reference(job)]},
        "addressType": family,
        "endpoints": [{"addresses": [a.ip], "hostname": a.hostname, "nodeName": a.node,
                       "conditions": {"ready": True, "serving": True, "terminating": False},
                       "targetRef": {"kind": "Pod", "namespace": job.namespace, "name": a.pod, "uid": a.uid}}
                      for a in chunk],
        "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "protocol": "TCP"}],
    }
