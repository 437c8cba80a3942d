"""Inter-pod rules of a replica's template that restrict nodes: required pod anti-affinity and
required topology spread (whenUnsatisfiable: DoNotSchedule), evaluated as kube-scheduler's
InterPodAffinity and PodTopologySpread filters would, so a node Railyard picks is one kube-scheduler
binds to.

Supported exactly:
- anti-affinity against existing pods, on any topology key (every node sharing the key's value with a
  matching pod is out);
- anti-affinity among the gang's own pods on `kubernetes.io/hostname` (one replica per node);
- topology spread on `kubernetes.io/hostname` (at most maxSkew more matching pods on a node than on
  the emptiest eligible node, counting existing pods and the gang's own).
Anything else among the gang's own pods (anti-affinity or spread on a coarser key) depends on the
order in which pods bind and is refused with a message (`template_problem`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from railyard.topology.cluster.model import GpuNode

HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class PodInfo:
    """An existing pod as the inter-pod rules see it."""

    namespace: str
    labels: Mapping[str, str]
    node: str


@dataclass(frozen=True)
class NodeLimits:
    rejected: Mapping[str, str] = field(default_factory=dict)  # node -> why it is out
    caps: Mapping[str, int] = field(default_factory=dict)  # node -> most replicas it may take


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; a missing selector matches nothing, an empty one everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _anti_affinity_terms(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    anti = (pod_spec.get("affinity") or {}).get("podAntiAffinity") or {}
    return list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _spread_constraints(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in pod_spec.get("topologySpreadConstraints") or []
            if (c.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule"]


def _in_scope(term: Mapping[str, Any], own_namespace: str, namespace: str) -> bool:
    if term.get("namespaceSelector") is not None:
        return True  # a namespace selector: counted against every namespace (never fewer conflicts)
    return namespace in (term.get("namespaces") or [own_namespace])


def has_inter_pod_rules(pod_spec: Mapping[str, Any]) -> bool:
    return bool(_anti_affinity_terms(pod_spec) or _spread_constraints(pod_spec))


def template_problem(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    """Why the gang's own pods could not be placed under these rules, or None."""
    for i, term in enumerate(_anti_affinity_terms(pod_spec)):
        if selector_matches(term.get("labelSelector"), labels) and term.get("topologyKey") != HOSTNAME:
            return (f"affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{i}]: anti-affinity "
                    f"among the gang's own pods on topologyKey {term.get('topologyKey')!r} is not supported "
                    f"(only {HOSTNAME})")
    for i, c in enumerate(_spread_constraints(pod_spec)):
        if c.get("topologyKey") != HOSTNAME:
            return (f"topologySpreadConstraints[{i}]: DoNotSchedule spread on topologyKey "
                    f"{c.get('topologyKey')!r} is not supported (only {HOSTNAME})")
    return None


def node_limits(pod_spec: Mapping[str, Any], namespace: str, labels: Mapping[str, str],
                pods: Iterable[PodInfo], nodes: Sequence[GpuNode]) -> NodeLimits:
    """Nodes the template's inter-pod rules exclude, and per-node replica caps."""
    terms = _anti_affinity_terms(pod_spec)
    spread = _spread_constraints(pod_spec)
    if not terms and not spread:
        return NodeLimits()
    by_name = {n.name: n for n in nodes}
    rejected: dict[str, str] = {}
    caps: dict[str, int] = {}
    pods = list(pods)
    for term in terms:
        key = term.get("topologyKey") or HOSTNAME
        taken = {by_name[p.node].labels.get(key) if key != HOSTNAME else p.node
                 for p in pods if p.node in by_name and _in_scope(term, namespace, p.namespace)
                 and selector_matches(term.get("labelSelector"), p.labels)}
        taken.discard(None)
        for node in nodes:
            value = node.name if key == HOSTNAME else node.labels.get(key)
            if value in taken:
                rejected.setdefault(node.name, f"pod anti-affinity ({key})")
        if selector_matches(term.get("labelSelector"), labels):
            for node in nodes:
                caps[node.name] = min(caps.get(node.name, 1), 1)
    for c in spread:
        selector = c.get("labelSelector")
        counts: Counter[str] = Counter(p.node for p in pods if p.namespace == namespace and p.node in by_name
                                       and selector_matches(selector, p.labels))
        eligible = [n for n in nodes if n.name not in rejected]
        floor = min((counts[n.name] for n in eligible), default=0)
        skew = int(c.get("maxSkew") or 1)
        own = selector_matches(selector, labels)
        for node in eligible:
            # kube-scheduler: count on the node + (1 if the pod itself matches) - the minimum <= maxSkew.
            # With many eligible nodes the minimum stays put while the gang binds, so a node may take
            # `floor + maxSkew - count` of the gang's own matching pods.
            room = floor + skew - counts[node.name] if own else skew - (counts[node.name] - floor) + 1
            if room <= 0:
                rejected[node.name] = f"topology spread ({HOSTNAME}, maxSkew {skew})"
            elif own:
                caps[node.name] = min(caps.get(node.name, room), room)
    return NodeLimits(rejected, caps)
