"""Keys Railyard writes on the objects it creates (those the pure core reads too are defined there)."""

from railyard.topology.cluster.labels import (
    ANNOTATION_GPUS,
    ANNOTATION_MAINTENANCE,
    ANNOTATION_QUARANTINED_AT,
    ANNOTATION_QUARANTINED_UNTIL,
    LABEL_JOB,
    LABEL_POD_GROUP,
    OUT_OF_SERVICE_TAINT,
    QUARANTINE_TAINT,
    SCHEDULING_GATE,
)

GROUP = "railyard.dev"
LABEL_RANK = "railyard.dev/rank"
LABEL_RESTART = "railyard.dev/restart-count"
ANNOTATION_PLACEMENT_ID = "railyard.dev/placement-id"
FIELD_MANAGER = "railyard-operator"
# On the leader's Lease: the topology the operator reads node labels with, so `railyard` commands read
# the cluster as the operator does without repeating --labels/--levels.
ANNOTATION_LABEL_PRESET = "railyard.dev/label-preset"
ANNOTATION_TOPOLOGY_LEVELS = "railyard.dev/topology-levels"

__all__ = [
    "ANNOTATION_GPUS", "ANNOTATION_LABEL_PRESET", "ANNOTATION_MAINTENANCE", "ANNOTATION_PLACEMENT_ID",
    "ANNOTATION_QUARANTINED_AT", "ANNOTATION_QUARANTINED_UNTIL", "ANNOTATION_TOPOLOGY_LEVELS",
    "FIELD_MANAGER", "GROUP",
    "LABEL_JOB", "LABEL_POD_GROUP", "LABEL_RANK", "LABEL_RESTART", "OUT_OF_SERVICE_TAINT", "QUARANTINE_TAINT",
    "SCHEDULING_GATE",
]
