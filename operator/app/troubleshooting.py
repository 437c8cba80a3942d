"""What each condition reason a TrainingJob can show means and what to do about it: `railyard explain`
prints the entries of the job's current conditions, and docs/troubleshooting.md is generated from them
(`hack/gen_docs.py`; tests/unit/test_generated_docs.py fails on drift and on a reason without an entry)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from railyard.operator.base.reasons import (
    ConditionType,
    FinishReason,
    PlacedReason,
    PreemptedReason,
    RecoveryReason,
    SizeReason,
    StalledReason,
    StragglingReason,
)

PAGE = "docs/troubleshooting.md"


@dataclass(frozen=True)
class Advice:
    condition: ConditionType
    status: str  # the condition's status the reason comes with
    reason: str
    means: str
    do: str

    @property
    def anchor(self) -> str:
        return f"{self.condition}-{self.reason}".lower()

    @property
    def link(self) -> str:
        return f"{PAGE}#{self.anchor}"


_P, _D, _S = ConditionType.PLACED, ConditionType.DEGRADED, ConditionType.STALLED

ADVICE: tuple[Advice, ...] = (
    # --- Placed=False: the job waits -------------------------------------------------------------------
    Advice(_P, "False", PlacedReason.UNSCHEDULABLE,
           "The gang does not fit on the cluster as it is now. The message names the binding constraint per "
           "tier: free whole nodes in the largest TOR, leaf or spine, a resource no node has enough of, or how "
           "many nodes are excluded and why (cordoned, tainted, quarantined, NotReady, nodeSelector).",
           "Run `railyard explain NAME` for the excluded nodes by reason. Wait for running jobs to finish, "
           "relax `spec.topology.requiredTier` (or use `preferredTier`), lower `replicas`/`minReplicas`, or give "
           "the job a higher PriorityClass so it may preempt. After `starvationSeconds` (90) it starts "
           "reserving (reason `Reserving`)."),
    Advice(_P, "False", PlacedReason.RESERVING,
           "The job has waited longer than `starvationSeconds` and now holds the nodes it waits for: no other "
           "job may start on them, so they only get freer until the gang fits. A reservation lasts at most "
           "`RAILYARD_RESERVATION_SECONDS` (600), then another waiting job may take its turn.",
           "Nothing, usually: it starts when the jobs on its held nodes finish. `railyard explain NAME` shows "
           "what it still waits for. If it never fits (more GPUs than the domain has), lower its size."),
    Advice(_P, "False", PlacedReason.PREEMPTING,
           "A higher-priority job that did not fit is evicting whole lower-priority gangs from one domain; the "
           "victims save a step first (`Preempted=True`, `SavingCheckpoint`) and its landing nodes are held "
           "for it meanwhile.",
           "Wait: it is placed when the victims are gone (bounded by `RAILYARD_PREEMPTION_HOLD_SECONDS`, 600). "
           "`kubectl get events --field-selector reason=Preempted -A` lists the victims."),
    Advice(_P, "False", PlacedReason.DEFRAGMENTING,
           "The job fits by free GPUs but not by topology; gangs marked `spec.preemption.migratable` are being "
           "moved out of one domain (checkpoint first) so it lands there whole.",
           "Wait for the moves (events `Migrating` on the moved jobs). Defragmentation is opt-in "
           "(`RAILYARD_DEFRAGMENTATION`) and bounded per hour."),
    Advice(_P, "False", PlacedReason.INVALID_SPEC,
           "The spec cannot be placed as written; the message names the field and the value (an unknown "
           "tier, a parallelism that does not multiply out, a template Railyard refuses). It holds nothing.",
           "Fix the field. `spec.template`, `spec.topology` and `spec.parallelism` are immutable: delete and "
           "re-create the job. `railyard plan --jobs job.yaml --nodes ...` checks a manifest offline."),
    Advice(_P, "False", PlacedReason.PRIORITY_CLASS_NOT_FOUND,
           "`spec.priorityClassName` names a PriorityClass that does not exist, so the job has no priority to "
           "queue by; it waits and holds nothing.",
           "`kubectl get priorityclasses`: create the class (an admin's task; the repository's examples use "
           "`examples/priorityclasses.yaml`) or change the field to an existing class."),
    Advice(_P, "False", PlacedReason.NAME_CONFLICT,
           "A pod or Service with a name the job needs (`NAME-<rank>`, `NAME` for its headless Service) exists "
           "and belongs to someone else; the placement is given back. Retried every 30 s.",
           "Delete or rename the object the message names, or rename the job."),
    Advice(_P, "False", PlacedReason.BIND_TIMEOUT,
           "The gang's pods were released but kube-scheduler did not bind them within `bindTimeoutSeconds` "
           "(60): something the operator does not count holds the node's resources (another scheduler's "
           "pods, static pods, a device plugin reporting fewer GPUs than the labels say). The gang is "
           "re-planned and the job avoids those nodes for `RAILYARD_AVOID_SECONDS` (600).",
           "`kubectl describe node NODE` for the nodes in `status.avoidNodes`: compare allocatable and the pods "
           "there with the node's GPU labels."),
    Advice(_P, "False", PlacedReason.DEVICE_UNAVAILABLE,
           "A ResourceClaim that pins the placement's GPUs or rail NICs could not be allocated: another claim "
           "holds a device, or the device is gone from the node's ResourceSlice. The gang was rolled back; the "
           "message names the device and its holder.",
           "Nothing if it is placed again elsewhere. If it repeats, compare the node's ResourceSlices with its "
           "GPU labels (`kubectl get resourceslices -o yaml`), and look for claims outside Railyard."),
    Advice(_P, "False", PlacedReason.NODE_LOST,
           "A node of a placement that was not yet released went away (deleted, NotReady, tainted); the "
           "placement was rolled back and the job is placed again.",
           "Nothing: it is re-planned at once. Many at once means nodes are failing: see the `RailyardPartition` "
           "runbook (docs/runbooks.md)."),
    Advice(_P, "False", PlacedReason.STALE_PODS,
           "Pods of the job exist without a recorded placement (left by an operator that stopped mid-way, or "
           "created by hand); they are deleted before the job is placed again.",
           "Nothing: wait for them to go. A pod stuck Terminating on a lost node is force-deleted after "
           "`RAILYARD_FORCE_DELETE_SECONDS` (60)."),
    Advice(_P, "False", PlacedReason.NO_REPLACEMENT,
           "The job lost ranks, no replacement node was free, and it went back to the queue as a whole "
           "(its other ranks gave their nodes back).",
           "Free or add capacity; it is placed again like a new job, resuming from its last checkpoint. An "
           "elastic job (`minReplicas`) shrinks instead when it can."),
    Advice(_P, "False", PlacedReason.PREEMPTED,
           "A higher-priority gang took this job's place; it saved a step, was evicted whole and re-queued.",
           "Nothing: it is placed again when there is room, resuming from the step it saved. A job may be "
           "preempted at most `RAILYARD_PREEMPTIONS_PER_HOUR` (2) times an hour; "
           "`spec.preemption.policy: Never` on the preemptor side does not protect it, a higher class does."),
    Advice(_P, "False", PlacedReason.QUOTA_EXCEEDED,
           "A ResourceQuota in the job's namespace refused its pods; the placement was given back and is "
           "retried with back-off.",
           "`kubectl describe resourcequota -n NS`: raise the quota, or lower the job's size or requests."),
    Advice(_P, "False", PlacedReason.NAMESPACE_TERMINATING,
           "The job's namespace is being deleted: the API server creates nothing in it any more, so the job is "
           "not placed (it holds no GPUs) and goes with the namespace.",
           "Nothing. If the namespace is stuck Terminating, `kubectl get namespace NS -o yaml` names what holds "
           "it (a finalizer)."),
    Advice(_P, "False", PlacedReason.INTERNAL_ERROR,
           "The operator failed on this job; it retries with back-off and the other jobs are not affected.",
           "Read the operator's log for the job's name (`kubectl logs -n railyard-system deploy/railyard`) and "
           "report it: this is a bug."),
    Advice(_P, "Unknown", PlacedReason.NEW,
           "The operator has not decided about the job yet: it was just created, or no operator is leading.",
           "Wait a few seconds. If it stays, check that an operator runs and holds its Lease (the "
           "`RailyardNoLeader` runbook in docs/runbooks.md)."),
    # --- Degraded / Stalled / Straggling / BelowDesired / Preempted / Failed ------------------------------
    Advice(_D, "True", RecoveryReason.NO_REPLACEMENT,
           "The job lost ranks and waits for a replacement node; its healthy ranks keep theirs.",
           "Free or add a node in the job's domain; an elastic job shrinks instead when it may."),
    Advice(_D, "True", RecoveryReason.REQUEUED,
           "The job lost ranks without a replacement and was re-queued whole (see `Placed` `NoReplacement`).",
           "Free or add capacity."),
    Advice(_D, "True", RecoveryReason.PARTITION,
           "Many nodes went NotReady together: the operator takes it for a partition of the control plane "
           "from the nodes, not for failed nodes, and holds still (no restarts, no quarantine, no deletions).",
           "Check the network between the nodes and the API server; it ends by itself when the nodes are Ready "
           "again (the `RailyardPartition` runbook in docs/runbooks.md)."),
    Advice(_D, "True", RecoveryReason.RESTART_CAP,
           "The job reached the hourly cap of infrastructure restarts (`RAILYARD_INFRA_RESTARTS_PER_HOUR`, 20); "
           "it waits until the hour's window allows another.",
           "Find why its nodes keep failing (`kubectl get events -n NS --field-selector involvedObject.name=NAME`); "
           "quarantined nodes carry the `railyard.dev/unhealthy` taint."),
    Advice(_S, "True", StalledReason.INTERNAL_ERROR,
           "The operator keeps failing on this placed job; it retries with back-off.",
           "Read the operator's log for the job's name and report it: this is a bug."),
    Advice(ConditionType.STRAGGLING, "True", StragglingReason.SLOW,
           "A node computes slower than its peers for `minDurationSeconds` (from the step times the ranks "
           "report); `status.stragglers` names it and what is done (reported, checkpoint asked, evicted).",
           "Check the node (thermals, clocks, ECC errors). `spec.stragglers.action` chooses whether the "
           "operator only reports, or evicts and quarantines the slowest node."),
    Advice(ConditionType.STRAGGLING, "True", StragglingReason.NETWORK,
           "Every node of a TOR is slow together: the fabric, not a node.",
           "Check the TOR switch and its uplinks; the operator evicts no node for it."),
    Advice(ConditionType.BELOW_DESIRED, "True", SizeReason.SHRUNK,
           "An elastic job runs with fewer replicas than `spec.replicas` after losing ranks or being shrunk "
           "for a preemptor; it grows back when capacity returns.",
           "Nothing, or free capacity."),
    Advice(ConditionType.BELOW_DESIRED, "True", SizeReason.NO_CAPACITY,
           "An elastic job was placed with fewer replicas than `spec.replicas` (at least `minReplicas`) "
           "because no more fit; it grows when capacity returns.",
           "Nothing, or free capacity."),
    Advice(ConditionType.PREEMPTED, "True", PreemptedReason.SAVING,
           "Chosen as a victim of a higher-priority gang: its ranks were asked to save a step; it is requeued "
           "when they have (or after `RAILYARD_PREEMPTION_CHECKPOINT_SECONDS`, 120).",
           "Nothing: it resumes from the saved step when placed again."),
    Advice(ConditionType.FAILED, "True", FinishReason.NON_RETRYABLE_EXIT,
           "A rank exited with a code listed in `spec.restartPolicy.nonRetryableExitCodes`.",
           "Read that rank's log (`kubectl logs NAME-<rank> -n NS --previous`)."),
    Advice(ConditionType.FAILED, "True", FinishReason.POD_FAILED,
           "The training process failed more often than `spec.restartPolicy.maxRestarts` allows.",
           "Read the failing rank's log; restarts caused by the infrastructure (lost nodes, drains, "
           "preemption) never count against `maxRestarts`."),
    Advice(ConditionType.FAILED, "True", FinishReason.TIME_LIMIT_EXCEEDED,
           "The gang ran for its `spec.timeLimitSeconds` (counted from `status.placedAt`, its last placement from "
           "the queue) and was ended.",
           "Raise the limit if the job needs longer, or resume it from its last checkpoint in a new job."),
    Advice(ConditionType.FAILED, "True", FinishReason.NO_REPLACEMENT,
           "The job lost ranks, found no replacement and may not wait for one.",
           "Re-create it when capacity is back."),
)

# Reasons with no advice: a job that carries them needs nothing done.
FINE: frozenset[str] = frozenset({
    PlacedReason.PLACING, PlacedReason.RELEASED, RecoveryReason.SHRUNK, RecoveryReason.RECOVERED,
    RecoveryReason.RELEASED, StalledReason.RECOVERED, StragglingReason.NO_STRAGGLERS, StragglingReason.RESTARTED,
    SizeReason.AT_DESIRED, PreemptedReason.PREEMPTED, PreemptedReason.SHRUNK, PreemptedReason.CANCELLED,
    PreemptedReason.READMITTED, FinishReason.ALL_SUCCEEDED,
})


def advice_for(conditions: Iterable[tuple[str, str, str | None]]) -> list[Advice]:
    """The entries for a job's (type, status, reason) conditions, in the table's order."""
    present = {(c, s, r) for c, s, r in conditions}
    return [a for a in ADVICE if (a.condition, a.status, a.reason) in present
            or (a.condition == ConditionType.PLACED and a.status == "False" and (a.condition, "Unknown", a.reason)
                in present)]
