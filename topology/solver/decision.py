"""The one placement decision, made the same way by the operator and by the offline planner: the
template's inter-pod rules (anti-affinity, topology spread) are evaluated against the pods that
exist or are placed, then `solver.solve` places the gang on the snapshot; a placed gang's GPUs and
requests are then taken from the snapshot for whoever comes next."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from railyard.topology.cluster.affinity import NodeLimits, PodInfo, has_inter_pod_rules, node_limits
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.node_rules import template_key
from railyard.topology.cluster.nodes import Trust, pod_usage, trust_all
from railyard.topology.solver.placement import Decision, solve
from railyard.topology.solver.request import GangRequest


def decide(snapshot: Snapshot, request: GangRequest, pods: Iterable[PodInfo] = ()) -> Decision:
    """Where the gang goes on this snapshot, or why it cannot go. `pods` are read only when the
    template has inter-pod rules (rare: they cost a pass over every pod)."""
    return solve(snapshot, request, inter_pod_limits(snapshot, request, pods))


def never_fits(snapshot: Snapshot, request: GangRequest) -> Decision | None:
    """None when the gang fits this cluster with nothing else on it; else that empty cluster's reason
    (a selector matching no node, more GPUs than exist): such a job must never hold a reservation.

    The answer depends on the nodes and the gang's shape alone, so it is memoised with the nodes
    (jobs of one shape ask once), and the solve skips what only the choice among placements needs
    (rank mapping, a preferred tier): on an empty 2,048-node cluster a solve took 20-380 ms, and the
    operator asked it of every job that did not fit at once — a quarter of its CPU on a living cluster."""
    key = ("never fits", template_key(request), request.smallest, request.gpus_per_replica,
           tuple(sorted(request.resources.items())), request.required_tier, request.rail_alignment)
    if key not in snapshot.memo:
        shape = replace(request, replicas=request.smallest, min_replicas=None, preferred_tier=None, parallelism=None)
        snapshot.memo[key] = solve(snapshot.emptied(), shape).reason
    reason = snapshot.memo[key]
    return None if reason is None else Decision(request, None, str(reason))


def inter_pod_limits(snapshot: Snapshot, request: GangRequest, pods: Iterable[PodInfo]) -> NodeLimits | None:
    """The nodes the template's inter-pod rules exclude and the per-node caps; None without rules."""
    if not has_inter_pod_rules(request.pod_spec):
        return None
    return node_limits(request.pod_spec, request.namespace, request.pod_labels, pods, snapshot.nodes)


def taken(snapshot: Snapshot, decision: Decision) -> Snapshot:
    """The snapshot with a placed gang's GPUs and per-replica requests in use."""
    if decision.placement is None:
        return snapshot
    return snapshot.allocate(decision.placement.allocations, decision.request.resources)


def placed_pods(decision: Decision) -> Sequence[PodInfo]:
    """A placed gang's replicas as the inter-pod rules of later gangs see them."""
    if decision.placement is None:
        return ()
    request = decision.request
    return tuple(PodInfo(request.namespace, request.pod_labels, r.node) for r in decision.placement.replicas)


def pod_infos(pods: Iterable[Mapping[str, Any]], trusted: Trust = trust_all) -> list[PodInfo]:
    """Pod objects that hold a node (bound, or pinned and believed; not finished), as inter-pod rules
    see them."""
    out = []
    for pod in pods:
        usage = pod_usage(pod, trusted(pod))
        if usage is not None:
            meta = pod.get("metadata") or {}
            out.append(PodInfo(meta.get("namespace") or "default", meta.get("labels") or {}, usage.node))
    return out
