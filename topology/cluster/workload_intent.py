"""What a workload Railyard places without owning it says about its gang's placement, read from its pod template
(docs/workloads.md): the topology intent in Railyard's annotations or Kueue TAS's (a node label key: the level it
labels), and the part of the pod spec placement reads (the rest is the owner's business). Pure; shared by the
operator's adopted gangs (operator/decide/adoption.py) and the offline planner (topology/planner/workloads.py)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

OPT_IN_LABEL = "railyard.dev/scheduling"  # value "gang": the pod webhook gates the pod
OPT_IN_VALUE = "gang"
REQUIRED_TIER = "railyard.dev/required-tier"
PREFERRED_TIER = "railyard.dev/preferred-tier"
RAIL_ALIGNMENT = "railyard.dev/rail-alignment"
TIME_LIMIT = "railyard.dev/time-limit-seconds"  # the gang's declared run time (spec.timeLimitSeconds)
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
# Pod fields that are the owner's business, not placement's: left out of the gang's TrainingJob template.
OWNERS_FIELDS = ("restartPolicy", "schedulingGates", "priorityClassName", "priority", "schedulerName",
                 "schedulingGroup", "nodeName", "hostname", "subdomain", "volumes", "initContainers",
                 "serviceAccountName", "serviceAccount", "securityContext", "overhead", "readinessGates",
                 "resourceClaims", "ephemeralContainers", "preemptionPolicy")


def tier_intent(annotations: Mapping[str, str], tier_of_label: Mapping[str, str]) -> dict[str, Any]:
    """spec.topology from the pod's annotations; Kueue's node label keys read as the level they label."""
    topology: dict[str, Any] = {}
    for railyard, kueue, field in ((REQUIRED_TIER, KUEUE_REQUIRED, "requiredTier"),
                                   (PREFERRED_TIER, KUEUE_PREFERRED, "preferredTier")):
        if annotations.get(railyard):
            topology[field] = annotations[railyard]
        elif annotations.get(kueue):
            label = annotations[kueue]
            topology[field] = tier_of_label.get(label, label)  # an unknown label is named as it is (InvalidSpec)
    if annotations.get(RAIL_ALIGNMENT):
        topology["railAlignment"] = annotations[RAIL_ALIGNMENT]
    return topology


def placement_spec(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec without the owner's fields: what the gang's TrainingJob template keeps."""
    spec = copy.deepcopy(dict(pod_spec))
    for field in OWNERS_FIELDS:
        spec.pop(field, None)
    return spec
