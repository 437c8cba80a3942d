"""Which nodes a job's pod template may run on: nodeSelector, required node affinity, tolerations.

Mirrors kube-scheduler's NodeAffinity and TaintToleration filters so that a node Railyard picks is
one kube-scheduler will bind to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from railyard.topology.cluster.model import GpuNode, Taint

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def _tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not key or key == taint.key
    return key == taint.key and (toleration.get("value") or "") == taint.value


def untolerated_taint(node: GpuNode, tolerations: Sequence[Mapping[str, Any]]) -> Taint | None:
    for taint in node.taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _expression_matches(expr: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    key, operator = expr.get("key", ""), expr.get("operator", "")
    values = [str(v) for v in expr.get("values") or []]
    present = key in values_of
    value = values_of.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            number, bound = int(value or ""), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def _term_matches(term: Mapping[str, Any], node: GpuNode) -> bool:
    expressions = term.get("matchExpressions") or []
    field_expressions = term.get("matchFields") or []
    if not expressions and not field_expressions:
        return False  # an empty term matches nothing, as in kube-scheduler
    return all(_expression_matches(e, node.labels) for e in expressions) and all(
        _expression_matches(e, {"metadata.name": node.name}) for e in field_expressions
    )


class PodConstraints:
    """The parts of a pod spec that restrict nodes, pre-digested once per job."""

    def __init__(self, pod_spec: Mapping[str, Any]) -> None:
        self.node_selector: Mapping[str, str] = pod_spec.get("nodeSelector") or {}
        affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        self.terms: Sequence[Mapping[str, Any]] = affinity.get("nodeSelectorTerms") or []
        self.tolerations: Sequence[Mapping[str, Any]] = pod_spec.get("tolerations") or []

    def reject_reason(self, node: GpuNode) -> str | None:
        """Why the node is unusable for this pod, or None if it is usable."""
        for key, value in self.node_selector.items():
            if node.labels.get(key) != str(value):
                return "nodeSelector"
        if self.terms and not any(_term_matches(t, node) for t in self.terms):
            return "node affinity"
        taint = untolerated_taint(node, self.tolerations)
        if taint is not None:
            return f"taint {taint.key}:{taint.effect}"
        return None
