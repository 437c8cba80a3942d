"""What the TrainingJob of an adopted gang (decide/adoption.py) needs next: the pods are their owner's, so Railyard
never creates, restarts or deletes them — it queues the gang once every pod exists gated, pins and ungates them
(Resume), says Running and Succeeded as for any gang, and when the owner replaces the gang's pods (a JobSet
restart, an LWS group re-created, a pod its Job made again) gives the placement back so the gang is placed anew
once its pods are all there again."""

from __future__ import annotations

from collections.abc import Sequence

from railyard.operator.base.objects import Job, PodView
from railyard.operator.base.reasons import ConditionType, FinishReason, PlacedReason
from railyard.operator.decide.actions import Action, Done, Finish, MarkRunning, Queue, Resume, Rollback, Wait
from railyard.operator.decide.adoption import ranked
from railyard.topology.cluster.workload_groups import GroupMember


def members(job: Job, pods: Sequence[PodView]) -> dict[str, GroupMember]:
    """The gang's live pods (by name) as its owner made them."""
    adopt = job.spec.adopt if job.spec is not None else None
    assert adopt is not None
    return {p.name: p.member for p in pods
            if p.member is not None and p.member.group == adopt.group and not p.terminating and not p.finished}


def rank_order(job: Job, pods: Sequence[PodView]) -> list[PodView] | None:
    """The gang's pods in rank order, when every one of them exists; None while some are missing."""
    adopt = job.spec.adopt if job.spec is not None else None
    assert adopt is not None
    offsets = dict(enumerate(adopt.offsets)) if adopt.offsets is not None else None
    names = ranked(members(job, pods), offsets)
    if names is None or job.spec is None or len(names) != job.spec.replicas:
        return None
    by_name = {p.name: p for p in pods}
    return [by_name[n] for n in names]


def assess_adopted(job: Job, pods: Sequence[PodView]) -> Action:
    if job.finished:
        return Done()  # never a Cleanup: the pods are their owner's
    placement = job.placement
    if placement is None:
        ordered = rank_order(job, pods)
        if ordered is None or not all(p.gated for p in ordered) or job.request is None:
            return Wait()  # until every pod of the gang exists, gated
        return Queue(job.request)
    by_name = {p.name: p for p in pods if not p.terminating}
    placed = [by_name.get(r.pod or "") for r in placement.ranks]
    replaced = [r.pod for r, p in zip(placement.ranks, placed, strict=True)
                if p is None or (r.pod_uid is not None and p.uid != r.pod_uid)]
    if replaced:
        # Their owner re-made some of the gang's pods: its placement is given back (deleting nothing) and the
        # gang is placed anew once its pods are all there again.
        return Rollback(PlacedReason.NODE_LOST, f"pods {', '.join(sorted(str(n) for n in replaced))} were "
                        "replaced by their owner; the gang is placed anew", ())
    current = [p for p in placed if p is not None]
    if any(p.gated for p in current):
        return Resume()
    if all(p.phase == "Succeeded" for p in current):
        return Finish(True, FinishReason.ALL_SUCCEEDED, f"all {len(current)} pods succeeded")
    if all(p.phase == "Running" for p in current) and not job.is_true(ConditionType.RUNNING):
        return MarkRunning(f"all {len(current)} pods running")
    return Wait()
