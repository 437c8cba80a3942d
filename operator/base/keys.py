"""Keys Railyard writes on the objects it creates."""

from railyard.topology.labels import ANNOTATION_GPUS

GROUP = "railyard.dev"
LABEL_JOB = "railyard.dev/job-name"
LABEL_RANK = "railyard.dev/rank"
LABEL_RESTART = "railyard.dev/restart-count"
LABEL_POD_GROUP = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins / Kubeflow Trainer convention
SCHEDULING_GATE = "railyard.dev/gang"
ANNOTATION_PLACEMENT_ID = "railyard.dev/placement-id"
FIELD_MANAGER = "railyard-operator"
QUARANTINE_TAINT = "railyard.dev/unhealthy"  # NoSchedule, value = the loss reason
# On a node quarantined for a limited time (stragglers): when the operator lifts the taint.
ANNOTATION_QUARANTINED_UNTIL = "railyard.dev/quarantined-until"

__all__ = [
    "ANNOTATION_GPUS", "ANNOTATION_PLACEMENT_ID", "ANNOTATION_QUARANTINED_UNTIL", "FIELD_MANAGER", "GROUP",
    "LABEL_JOB", "LABEL_POD_GROUP",
    "LABEL_RANK", "LABEL_RESTART", "QUARANTINE_TAINT", "SCHEDULING_GATE",
]
