"""Save on fault, decided: when a running gang of a job that declares `checkpoint.saveOnFault` loses ranks without
warning, whether its surviving ranks still hold every model shard (topology/solver/shard_cover.py) and which of
them save which shard; once they saved (or the wait is over) the restart goes, resuming from what they saved.
Pure: act/checkpoints.py asks the ranks and waits; act/recovery.py records the outcome on `lastRestart`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from railyard.operator.base.objects import Job, PodView
from railyard.operator.decide.actions import Restart
from railyard.topology.api.status import SaveOnFaultRecord
from railyard.topology.cluster.faults import LossReason
from railyard.topology.solver.commgraph import Layout
from railyard.topology.solver.shard_cover import cover

# Planned moves save every rank's step first (restart_plan.saves_first); a straggler's eviction follows its own
# checkpoint (checkpointBeforeEvict) and loses no shard.
PLANNED = (LossReason.MAINTENANCE, LossReason.MIGRATION, LossReason.STRAGGLER)


class FaultSaveOutcome(StrEnum):
    SAVED = "Saved"  # every saver saved the same step: the new attempt resumes from it
    NO_LAYOUT = "NoLayout"  # the gang's GPUs do not divide into its tensor x pipeline groups
    SHARD_LOST = "ShardLost"  # some shard had no surviving data-parallel replica
    NO_ANSWER = "NoAnswer"  # the savers did not all save within the wait
    NOT_REPORTING = "NotReporting"  # nothing was heard from the ranks of this attempt: none could answer
    WAITING = "Waiting"  # asked; not all answered yet (never recorded)


@dataclass(frozen=True)
class FaultSave:
    """The survivors asked to save (`savers`: rank -> the local ranks saving a shard, one per shard), or why none
    is (`outcome`)."""

    savers: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    outcome: FaultSaveOutcome | None = None
    message: str = ""


def plan_fault_save(job: Job, action: Restart, pods: Sequence[PodView]) -> FaultSave | None:
    """None when the restart is not one for save on fault (the job does not declare it, the restart is a planned
    move, the gang is not placed)."""
    model, placement, request = job.model, job.placement, job.request
    if model is None or placement is None or request is None or action.reason in PLANNED:
        return None
    if model.spec.checkpoint is None or not model.spec.checkpoint.save_on_fault:
        return None
    lost_nodes = {loss.node for loss in action.losses}
    live = {p.name: p for p in pods if not p.terminating and not p.finished}
    lost = frozenset(r.rank for r in placement.ranks
                     if r.node in lost_nodes or (p := live.get(r.pod or "")) is None
                     or (r.pod_uid is not None and p.uid != r.pod_uid))
    replicas = len(placement.ranks)
    layout = Layout.of(replicas, request.gpus_per_replica, model.spec.parallelism)
    if layout is None:
        return FaultSave(outcome=FaultSaveOutcome.NO_LAYOUT, message=(
            f"{replicas} x {request.gpus_per_replica} GPUs do not divide into the job's tensor x pipeline groups"))
    shards = cover(layout, replicas, lost)
    if not shards.covered:
        missing = ", ".join(f"(t{t}, p{p})" for t, p in shards.lost_shards[:8])
        return FaultSave(outcome=FaultSaveOutcome.SHARD_LOST, message=(
            f"no surviving replica holds shard {missing}{' ...' if len(shards.lost_shards) > 8 else ''} "
            f"(ranks {_ranks(lost)} lost)"))
    return FaultSave(shards.savers, None, f"ranks {_ranks(frozenset(shards.savers))} save the last step they "
                     f"completed, one per shard (ranks {_ranks(lost)} lost)")


def answered(savers: Mapping[int, tuple[int, ...]], saved: Mapping[int, tuple[int, str]],
             after_step: int | None) -> tuple[int, str] | bool:
    """The step every saver saved for the request (`saved`: rank -> (step, path) each saver reported), newer than
    the last committed checkpoint (`after_step`) and under one path; True when every saver answered but not so
    (nothing newer to keep, or shards of different steps or places: no checkpoint), so the wait ends; False while
    some saver has not answered."""
    if any(r not in saved for r in savers):
        return False
    answers = {saved[r] for r in savers}
    if len(answers) != 1:
        return True
    step, path = answers.pop()
    return (step, path) if after_step is None or step > after_step else True


def record(plan: FaultSave, outcome: FaultSaveOutcome, step: int | None = None) -> SaveOnFaultRecord:
    """What `lastRestart.saveOnFault` says."""
    message = plan.message if outcome is not FaultSaveOutcome.SAVED else f"{plan.message}: step {step} saved"
    if outcome is FaultSaveOutcome.NO_ANSWER:
        message = (f"{plan.message}: no step newer than the last checkpoint saved by all, in one place, in time; "
                   "resumed from the last checkpoint")
    return SaveOnFaultRecord(outcome=str(outcome), step=step, savers=sorted(plan.savers), message=message)


def _ranks(ranks: frozenset[int]) -> str:
    shown = sorted(ranks)
    return ", ".join(map(str, shown[:16])) + (" ..." if len(shown) > 16 else "")
