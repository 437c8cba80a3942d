"""nodeSelector, required node affinity and tolerations, table-driven like kube-scheduler's filters."""

from __future__ import annotations

import pytest
from railyard.topology.cluster.eligibility import PodConstraints
from railyard.topology.cluster.model import GpuNode, Taint

NODE = GpuNode("n1", "s", "l", "t", (0,), (0,), (0,), labels={"pool": "a", "gen": "5"},
               taints=(Taint("dedicated", "train", "NoSchedule"), Taint("soft", "", "PreferNoSchedule")))
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"}]


def affinity(*expressions: dict, fields: list | None = None) -> dict:
    term: dict = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = fields
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.mark.parametrize(("spec", "reason"), [
    ({"tolerations": TOLERATE}, None),
    ({}, "taint dedicated:NoSchedule"),
    ({"tolerations": [{"operator": "Exists"}]}, None),
    ({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}, None),
    ({"tolerations": [{"key": "dedicated", "value": "other", "effect": "NoSchedule"}]}, "taint dedicated:NoSchedule"),
    ({"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]},
     "taint dedicated:NoSchedule"),
    ({"tolerations": TOLERATE, "nodeSelector": {"pool": "a"}}, None),
    ({"tolerations": TOLERATE, "nodeSelector": {"pool": "b"}}, "nodeSelector"),
    ({"tolerations": TOLERATE, "affinity": affinity({"key": "pool", "operator": "In", "values": ["a", "b"]})}, None),
    ({"tolerations": TOLERATE, "affinity": affinity({"key": "pool", "operator": "NotIn", "values": ["a"]})},
     "node affinity"),
    ({"tolerations": TOLERATE, "affinity": affinity({"key": "gen", "operator": "Gt", "values": ["4"]})}, None),
    ({"tolerations": TOLERATE, "affinity": affinity({"key": "gen", "operator": "Lt", "values": ["4"]})},
     "node affinity"),
    ({"tolerations": TOLERATE, "affinity": affinity({"key": "x", "operator": "DoesNotExist"})}, None),
    ({"tolerations": TOLERATE, "affinity": affinity(
        fields=[{"key": "metadata.name", "operator": "In", "values": ["n2"]}])}, "node affinity"),
])
def test_constraints(spec, reason):
    assert PodConstraints(spec).reject_reason(NODE) == reason
