"""Which nodes a gang may use, and how many replicas each may take: the template's node rules
(selectors, affinity, taints, GPU count; memoised per node set), the inter-pod limits of
affinity.py, and the node's non-GPU resources (node_fit.py). The solver's first step.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from railyard.topology.cluster.affinity import NodeLimits
from railyard.topology.cluster.eligibility import PodConstraints
from railyard.topology.cluster.labels import GPU_RESOURCE
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.cluster.node_arrays import node_arrays
from railyard.topology.cluster.node_fit import node_fit
from railyard.topology.cluster.resources import replicas_that_fit
from railyard.topology.solver.request import GangRequest

_GPU_ONLY = frozenset({GPU_RESOURCE})  # GPUs are counted by index, not by amount


def excluded_nodes(snapshot: Snapshot, request: GangRequest, limits: NodeLimits | None = None) -> dict[str, str]:
    """Every node this gang may not use, and why (for `railyard explain`)."""
    why: dict[str, str] = {e.node: e.reason for e in snapshot.excluded}
    eligible_nodes(snapshot, request, limits, why)
    return why


def template_eligible(snapshot: Snapshot, request: GangRequest) -> frozenset[str]:
    """The nodes the gang's template may use at all (selectors, affinity, taints, GPU product): what
    no eviction or move can change."""
    return frozenset(n.name for n in _template_check(snapshot, request).eligible)


def template_indices(snapshot: Snapshot, request: GangRequest) -> NDArray[np.intp]:
    """template_eligible as indices into the snapshot's nodes, in order."""
    return _template_check(snapshot, request).indices


def eligible_nodes(snapshot: Snapshot, request: GangRequest, limits: NodeLimits | None,
                   why: dict[str, str] | None = None,
                   ) -> tuple[list[GpuNode], NDArray[np.intp], Counter[str], dict[str, int]]:
    """Nodes the template may use (and their indices in the snapshot), why the others may not, and
    how many replicas each node's non-GPU resources (cpu, memory, pods, RDMA NICs ...) and inter-pod
    rules leave room for."""
    check = _template_check(snapshot, request)
    rejected: Counter[str] = Counter(e.reason for e in snapshot.excluded)
    if limits is None and why is None:
        return _eligible_by_arrays(snapshot, request, check, rejected)
    template_reasons = check.reasons
    eligible: list[GpuNode] = []
    caps: dict[str, int] = {}
    for node, reason in zip(snapshot.nodes, template_reasons, strict=True):
        if reason is None and limits is not None:
            reason = limits.rejected.get(node.name)
        if reason:
            rejected[reason] += 1
            if why is not None:
                why[node.name] = reason
            continue
        if limits is not None and node.name in limits.caps:
            caps[node.name] = limits.caps[node.name]
        if request.resources and node.allocatable:
            fit, binding = replicas_that_fit(node.allocatable, snapshot.requested_on(node.name), request.resources,
                                             _GPU_ONLY)
            if fit == 0:
                rejected[f"insufficient {binding}"] += 1
                if why is not None:
                    why[node.name] = f"insufficient {binding}"
                continue
            caps[node.name] = min(fit, caps.get(node.name, fit))
        eligible.append(node)
    where = snapshot.positions()
    return eligible, np.array([where[n.name] for n in eligible], dtype=np.intp), rejected, caps


def _eligible_by_arrays(snapshot: Snapshot, request: GangRequest, check: _TemplateCheck,
                        rejected: Counter[str]) -> tuple[list[GpuNode], NDArray[np.intp], Counter[str], dict[str, int]]:
    """eligible_nodes without inter-pod rules or explanations, over every node at once (numpy); caps
    only where resources bind below the node's GPU slots (elsewhere a cap changes nothing)."""
    rejected.update(check.rejected)
    if not request.resources:
        return list(check.eligible), check.indices, rejected, {}
    fit = node_fit(snapshot, request.resources, _GPU_ONLY)
    counts = fit.fit[check.indices]
    short = counts == 0
    if short.any():
        bound, times = np.unique(fit.binding[check.indices[short]], return_counts=True)
        rejected.update({f"insufficient {fit.resources[b]}": int(t) for b, t in zip(bound, times, strict=True)})
    keep = check.indices[~short]
    nodes = snapshot.nodes
    slots = node_arrays(snapshot).gpu_count[keep] // request.gpus_per_replica if request.gpus_per_replica else 1
    binds = np.flatnonzero(counts[~short] < slots)
    caps = {nodes[i].name: int(c) for i, c in zip(keep[binds].tolist(), counts[~short][binds].tolist(), strict=True)}
    return [nodes[i] for i in keep.tolist()], keep, rejected, caps


@dataclass(frozen=True)
class _TemplateCheck:
    reasons: list[str | None]  # per node in snapshot order: why the template rules it out, or None
    eligible: tuple[GpuNode, ...]
    indices: NDArray[np.intp]  # of the eligible nodes, in snapshot order
    rejected: Counter[str]


def template_key(request: GangRequest) -> str:
    """What of the template decides which nodes it may use (selectors, affinity, tolerations)."""
    constraints = PodConstraints(request.pod_spec)
    return json.dumps([constraints.node_selector, constraints.terms, constraints.tolerations], sort_keys=True,
                      default=str)


def _template_check(snapshot: Snapshot, request: GangRequest) -> _TemplateCheck:
    """Per node, why the template's node constraints rule it out. Depends only on the nodes, so it
    is memoised on the snapshot (and the operator keeps that memo across passes over one node set):
    a queue of jobs sharing a template checks every node's taints and labels once, not once per job."""
    key = ("template", request.gpus_per_replica, template_key(request))
    cached = snapshot.memo.get(key)
    if cached is not None:
        return cached  # type: ignore[return-value]
    constraints = PodConstraints(request.pod_spec)
    unconstrained = not (constraints.node_selector or constraints.terms or any(n.taints for n in snapshot.nodes))
    reasons: list[str | None] = []
    for node in snapshot.nodes:
        if node.gpu_count < request.gpus_per_replica:
            reasons.append(f"fewer than {request.gpus_per_replica} GPUs")
        else:
            reasons.append(None if unconstrained else constraints.reject_reason(node))
    indices = np.array([i for i, r in enumerate(reasons) if r is None], dtype=np.intp)
    check = _TemplateCheck(reasons, tuple(snapshot.nodes[i] for i in indices.tolist()), indices,
                           Counter(r for r in reasons if r))
    snapshot.memo[key] = check
    return check


