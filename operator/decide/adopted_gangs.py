"""What the TrainingJob of an adopted gang (decide/adoption.py) needs next: the pods are their owner's, so Railyard
never creates, restarts or deletes them — it queues the gang once every pod exists gated, pins and ungates them
(Resume), says Running and Succeeded as for any gang, and when the owner replaces the gang's pods (a JobSet
restart, an LWS group re-created, a pod its Job made again) gives the placement back so the gang is placed anew
once its pods are all there again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from railyard.operator.base.objects import Job, PodView
from railyard.operator.base.reasons import ConditionType, FinishReason, PlacedReason
from railyard.operator.decide.actions import (
    Action,
    Done,
    Finish,
    MarkRunning,
    PlaceReplaced,
    Queue,
    RecordRelease,
    RestorePlacement,
    Resume,
    Rollback,
    Wait,
)
from railyard.operator.decide.adoption import ranked
from railyard.topology.cluster.affinity import NodeLimits
from railyard.topology.cluster.faults import NodeHealth, NodeLoss, losses_of
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.cluster.workload_groups import GroupMember
from railyard.topology.solver.replace import RankSlot, ReplacementDecision, solve_replacement


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
        if ordered is None or job.request is None:
            return Wait()  # until every pod of the gang exists
        if all(p.gated for p in ordered):
            return Queue(job.request)
        # Only a TrainingJob that never placed anything (made again after a hand deletion): one that gave its
        # placement back (preempted, rolled back) sees its pods released until they go.
        if not job.status.placements and job.condition(ConditionType.PLACED) is None and \
                len({p.placement_id for p in ordered}) == 1 and all(
                    not p.gated and p.placement_id and p.usage is not None for p in ordered):
            return RestorePlacement(tuple((p.name, p.uid) for p in ordered))
        return Wait()  # gated and released pods mixed, under no placement: nothing Railyard can place
    by_name = {p.name: p for p in pods if not p.terminating}
    placed = [by_name.get(r.pod or "") for r in placement.ranks]
    if any(p is None or (r.pod_uid is not None and p.uid != r.pod_uid) or p.phase == "Failed"
           for r, p in zip(placement.ranks, placed, strict=True)):
        return _replaced(job, pods)
    current = [p for p in placed if p is not None]
    if any(p.gated for p in current):
        return Resume()
    if all(p.phase == "Succeeded" for p in current):
        return Finish(True, FinishReason.ALL_SUCCEEDED, f"all {len(current)} pods succeeded")
    if all(p.phase == "Running" for p in current) and not job.is_true(ConditionType.RUNNING):
        return MarkRunning(f"all {len(current)} pods running")
    placed_now = job.condition(ConditionType.PLACED)
    if placed_now is None or placed_now.reason != PlacedReason.RELEASED:
        return RecordRelease()  # every pod released (and running already, or by a predecessor): say so
    return Wait()


def _replaced(job: Job, pods: Sequence[PodView]) -> Action:
    """Their owner re-made some of the gang's pods (a pod its Job made again, a node lost under it): once every
    rank has its pod again, only the re-made ones are placed, next to the survivors; when none survived (a JobSet
    restart makes a new gang; an LWS group re-created whole) the placement is given back, deleting nothing."""
    placement = job.placement
    assert placement is not None
    if not members(job, pods):  # none is left running or waiting
        group = job.spec.adopt.group if job.spec is not None and job.spec.adopt is not None else None
        ended = [p for p in pods if p.member is not None and p.member.group == group and p.finished]
        if ended and all(p.phase == "Succeeded" for p in ended):
            return Finish(True, FinishReason.ALL_SUCCEEDED, f"all {len(ended)} pods left succeeded")
        # Gone for now (an LWS group re-created whole passes through none): the placement is given back and the
        # gang placed anew if its owner makes its pods again (a JobSet restart makes a new gang instead).
        return Rollback(PlacedReason.NODE_LOST, "every pod of the gang is gone; placed anew when its owner makes "
                        "them again", ())
    ordered = rank_order(job, pods)
    if ordered is None or job.request is None:
        return Wait()  # the owner is re-making them
    ranks = sorted(placement.ranks, key=lambda r: r.rank)
    fresh = [r.rank for r in ranks if ordered[r.rank].uid != r.pod_uid]
    survivors = [ordered[r.rank] for r in ranks if ordered[r.rank].uid == r.pod_uid]
    if not survivors or any(p.gated for p in survivors):
        names = ", ".join(ordered[r].name for r in fresh)
        return Rollback(PlacedReason.NODE_LOST, f"pods {names} were replaced by their owner; the gang is placed "
                        "anew", ())
    if not all(ordered[r].gated for r in fresh):
        return Wait()  # not gated: not Railyard's to place (the webhook did not see it)
    return PlaceReplaced(tuple(fresh), tuple((p.name, p.uid) for p in ordered), job.request)


def plan_replaced(job: Job, action: PlaceReplaced, snapshot: Snapshot, models: Mapping[str, GpuNode],
                  limits: NodeLimits | None, avoid: frozenset[str]) -> ReplacementDecision:
    """Homes for the re-made ranks: the survivors keep theirs; a re-made rank's old GPUs are free again (its
    pod is gone), its old node (if still usable) is the nearest home, then its TOR, leaf, spine."""
    placement = job.placement
    assert placement is not None
    again = set(action.ranks)
    ranks = sorted(placement.ranks, key=lambda r: r.rank)
    keep = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks if r.rank not in again]
    lost = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks if r.rank in again]
    gone = {s.node for s in lost if not snapshot.has_node(s.node)}
    freed = snapshot.release([(s.node, s.gpus) for s in lost if s.node not in gone])
    return solve_replacement(freed, action.request, keep, lost, {n: models[n] for n in gone if n in models}, limits,
                             avoid)


def replaced_ranks(job: Job, action: PlaceReplaced, decision: ReplacementDecision,
                   snapshot: Snapshot) -> list[tuple[GpuNode, tuple[int, ...]]]:
    """The gang's placement in rank order with the re-made ranks at their new homes."""
    placement = job.placement
    assert placement is not None
    new_home = {r.rank: r for r in decision.replacements}
    out = []
    for r in sorted(placement.ranks, key=lambda r: r.rank):
        moved = new_home.get(r.rank)
        node, gpus = (moved.new, moved.gpus) if moved else (r.node, tuple(r.gpus))
        out.append((snapshot.node(node), gpus))
    return out


def replaced_losses(job: Job, action: PlaceReplaced, health: Mapping[str, NodeHealth],
                    now: float) -> tuple[NodeLoss, ...]:
    """The nodes the re-made ranks were on that count as lost now (`now` monotonic): their quarantine is planned
    as a TrainingJob's (decide/restart_plan.plan_quarantine); a rank whose pod merely failed loses no node."""
    placement = job.placement
    assert placement is not None and job.request is not None and job.model is not None
    tolerations = list(job.request.pod_spec.get("tolerations") or [])
    held: dict[str, int] = {}
    for r in placement.ranks:
        if r.rank in action.ranks:
            held[r.node] = held.get(r.node, 0) + len(r.gpus)
    return losses_of(held, health, tolerations, now, job.model.spec.fault_policy.node_loss_grace_seconds)
