"""Every state, condition and reason a TrainingJob can carry, as enums: metrics and alerts iterate
them, so a new reason is covered everywhere by construction (a string literal once left a metric
series stale: `railyard_queue_oldest_wait_seconds{reason="NoReplacement"}` was never reset).

Loss reasons belong to the pure core (`railyard.topology.cluster.faults.LossReason`); a restart's reason is
either one of those or one of `RestartReason`'s own.
"""

from __future__ import annotations

from enum import StrEnum

from railyard.topology.cluster.faults import LossReason


class ConditionType(StrEnum):
    PLACED = "Placed"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    RESTARTING = "Restarting"  # a restart decided, until its attempt is released
    DEGRADED = "Degraded"  # lost ranks without a replacement yet (waiting, or re-queued)
    BELOW_DESIRED = "BelowDesired"  # an elastic job runs with fewer replicas than spec.replicas
    STRAGGLING = "Straggling"  # a node slow for minDurationSeconds (Slow) or a whole TOR (Network)
    STALLED = "Stalled"  # the operator keeps failing on this placed job (kstatus' convention); retried
    PREEMPTED = "Preempted"  # chosen as a victim of a higher-priority gang (saving a step, or requeued)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class JobState(StrEnum):
    """One word per job for metrics and the CLI (the first True of Succeeded, Failed, Running, Placed)."""

    QUEUED = "Queued"
    PLACED = "Placed"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class PlacedReason(StrEnum):
    """The Placed condition's reasons. NEW is never written: a job the operator has not decided on yet."""

    NEW = "New"
    UNSCHEDULABLE = "Unschedulable"  # the message names the binding constraint per tier
    RESERVING = "Reserving"  # starving: the domain it waits for is held for it
    PREEMPTING = "Preempting"  # lower-priority gangs are leaving the domain held for it
    DEFRAGMENTING = "Defragmenting"  # gangs are being moved out of the domain held for it
    INVALID_SPEC = "InvalidSpec"  # names the field and value; holds nothing
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"  # spec.priorityClassName names no PriorityClass
    NAME_CONFLICT = "NameConflict"  # a pod or Service of its name belongs to someone else
    BIND_TIMEOUT = "BindTimeout"
    DEVICE_UNAVAILABLE = "DeviceUnavailable"  # a device a pod's ResourceClaim pins is held by another claim, or gone
    NODE_LOST = "NodeLost"  # a node of an unreleased placement is gone
    STALE_PODS = "StalePods"  # pods without a recorded placement
    NO_REPLACEMENT = "NoReplacement"  # re-queued whole after lost ranks found no replacement
    PREEMPTED = "Preempted"  # re-queued whole: a higher-priority gang took its place
    QUOTA_EXCEEDED = "QuotaExceeded"  # a ResourceQuota refused its pods: retried with backoff
    NAMESPACE_TERMINATING = "NamespaceTerminating"  # its namespace is being deleted: it goes with it
    INTERNAL_ERROR = "InternalError"  # the operator failed on this job (its log says how); retried
    PLACING = "Placing"  # recorded, pods being created
    RELEASED = "Released"

    @property
    def waiting(self) -> bool:
        """A reason a job can carry while it waits for a placement."""
        return self not in (PlacedReason.PLACING, PlacedReason.RELEASED)


WAITING_REASONS: tuple[PlacedReason, ...] = tuple(r for r in PlacedReason if r.waiting)


class RestartReason(StrEnum):
    """Why a gang restarted that is not a node loss (those are LossReason)."""

    POD_DISRUPTED = "PodDisrupted"  # evicted or preempted (DisruptionTarget)
    POD_DELETED = "PodDeleted"  # deleted by someone else
    PROCESS_FAILED = "ProcessFailed"  # the training process exited non-zero (counts against maxRestarts)
    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    PREEMPTED = "Preempted"  # evicted whole for a higher-priority gang (requeued, never counted)


Cause = LossReason | RestartReason  # what a restart record and railyard_restarts_total{reason} name
CAUSES: tuple[Cause, ...] = (*LossReason, *RestartReason)


class FinishReason(StrEnum):
    """Succeeded and Failed reasons (also set on Running=False when the job ends)."""

    ALL_SUCCEEDED = "AllSucceeded"
    NON_RETRYABLE_EXIT = "NonRetryableExit"
    TIME_LIMIT_EXCEEDED = "TimeLimitExceeded"  # ran for spec.timeLimitSeconds: ended
    POD_FAILED = "PodFailed"
    NO_REPLACEMENT = "NoReplacement"


class RunningReason(StrEnum):
    ALL_RUNNING = "AllRunning"
    RESTARTING = "Restarting"  # Running=False while a new attempt is placed
    NO_REPLACEMENT = "NoReplacement"  # Running=False: re-queued whole
    PREEMPTED = "Preempted"  # Running=False: evicted for a higher-priority gang


class RecoveryReason(StrEnum):
    """Degraded and Restarting reasons (Restarting=True carries the restart's Cause)."""

    NO_REPLACEMENT = "NoReplacement"  # Degraded=True while waiting for a replacement
    REQUEUED = "Requeued"  # Degraded=True: placed again as a whole
    SHRUNK = "Shrunk"  # Degraded=False: continued on the survivors
    RECOVERED = "Recovered"  # Degraded=False: every rank has a node again
    RELEASED = "Released"  # Restarting=False: the new attempt is released
    PARTITION = "Partition"  # Degraded=True: many nodes went dark together; the fault path holds still
    RESTART_CAP = "RestartCap"  # Degraded=True: infrastructure restarts hit the hourly cap


class PreemptedReason(StrEnum):
    """Preempted condition reasons."""

    SAVING = "SavingCheckpoint"  # True: chosen as a victim; its ranks save a step, then it is requeued
    PREEMPTED = "Preempted"  # True: requeued for the preemptor the message names
    SHRUNK = "Shrunk"  # True: an elastic job shrunk towards minReplicas for the preemptor (it runs on)
    CANCELLED = "Cancelled"  # False: the preemptor no longer needs the room (placed, gone, timed out)
    READMITTED = "Readmitted"  # False: placed again


class PreemptionOutcome(StrEnum):
    """railyard_preemptions_total{outcome}."""

    PLANNED = "planned"
    EVICTED = "evicted"
    CANCELLED = "cancelled"
    SHRUNK = "shrunk"
    TIMED_OUT = "timed_out"


class SizeReason(StrEnum):
    """BelowDesired reasons."""

    SHRUNK = "Shrunk"
    AT_DESIRED = "AtDesired"
    NO_CAPACITY = "NoCapacity"


class StalledReason(StrEnum):
    INTERNAL_ERROR = "InternalError"
    RECOVERED = "Recovered"


class StragglingReason(StrEnum):
    SLOW = "Slow"
    NETWORK = "Network"
    NO_STRAGGLERS = "NoStragglers"
    RESTARTED = "Restarted"  # a new attempt is measured afresh


class EventReason(StrEnum):
    """Event reasons that are not also a condition reason."""

    NODE_LOST = "NodeLost"
    REPLACEMENT_CHOSEN = "ReplacementChosen"
    RESTART_ISSUED = "RestartIssued"
    RESIZED = "Resized"
    SHRUNK = "Shrunk"
    STRAGGLER_DETECTED = "StragglerDetected"
    QUARANTINE_SKIPPED = "QuarantineSkipped"  # a loss called for one; the operator's limits said no
    PREEMPTION_TIMED_OUT = "PreemptionTimedOut"  # victims did not leave in time: the hold is released
    MIGRATING = "Migrating"  # this gang is moved (checkpoint first) so a waiting gang fits
    MIGRATION_CANCELLED = "MigrationCancelled"  # the move is off (the waiting gang no longer needs it, or no room)
    PLACEMENT_RESTORED = "PlacementRestored"  # an adopted gang's TrainingJob made again: placement read from pods
    BACKFILLED = "Backfilled"  # placed on nodes reserved for a starving gang: its time limit ends first
    LENT_RESERVED_NODES = "LentReservedNodes"  # a small job placed on a starving gang's reserved nodes (opt-in rule)
    SAVE_ON_FAULT = "SaveOnFault"  # what a fault's survivors saved, or why they did not (lastRestart.saveOnFault)


Reason = (PlacedReason | LossReason | RestartReason | FinishReason | RunningReason | RecoveryReason | SizeReason
          | StragglingReason | StalledReason | EventReason | PreemptedReason)


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class StragglerMark(StrEnum):
    """status.stragglers[].action: what the operator does about a flagged node."""

    REPORTED = "Reported"
    CHECKPOINT_REQUESTED = "CheckpointRequested"
    EVICTED = "Evicted"
