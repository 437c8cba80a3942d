"""What a TrainingJob needs next: a pure function of the job, its pods, the snapshot and the time.

Order of the questions, each answered only when the ones before it are not:
finished (clean up) -> spec invalid -> no placement (queue, or roll back stray pods) -> placement
not released (resume, or roll back when a node is gone) -> released: node loss, disruption, deleted
pod, failed pod, success, bind timeout, running, resize, interrupted release.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from railyard.operator.base.objects import Job, PodView
from railyard.operator.base.reasons import ConditionType, FinishReason, PlacedReason, RestartReason
from railyard.operator.decide.actions import (
    Action,
    Cleanup,
    Done,
    Finish,
    Invalid,
    MarkRunning,
    Queue,
    Resize,
    Restart,
    Resume,
    Rollback,
    Wait,
)
from railyard.topology.api import PlacementStatus
from railyard.topology.faults import NodeLoss, node_loss
from railyard.topology.levels import LevelError
from railyard.topology.model import Snapshot
from railyard.topology.timestamps import epoch

REFUSED_PREFIX = "the API server refused"  # an InvalidSpec from a create the API server refused


def seconds_since(timestamp: str | None, now: float) -> float:
    return now - epoch(timestamp, now)


def _stuck(pods: Sequence[PodView], snapshot: Snapshot, now: float, force_after: float) -> tuple[str, ...]:
    """Pods Terminating for longer than `force_after` on a node that is gone or not Ready: no kubelet
    will ever confirm their deletion, so only a forced delete frees the name (and their GPUs)."""
    out = []
    for p in pods:
        if not p.terminating or seconds_since(p.deleted_at, now) < force_after:
            continue
        node = p.node_name or (p.usage.node if p.usage else None)
        if node is None or not snapshot.has_node(node):
            out.append(p.name)
    return tuple(out)


def node_losses(placement: PlacementStatus, tolerations: Sequence[Mapping[str, Any]],
                health: Mapping[str, Mapping[str, Any]], now: float, grace: float) -> tuple[NodeLoss, ...]:
    """The placement's nodes whose ranks count as lost now (see topology.faults)."""
    held: dict[str, int] = {}
    for r in placement.ranks:
        held[r.node] = held.get(r.node, 0) + len(r.gpus)
    losses = (node_loss(name, health.get(name), gpus, tolerations, now, grace) for name, gpus in sorted(held.items()))
    return tuple(loss for loss in losses if loss is not None)


def assess(job: Job, pods: Sequence[PodView], snapshot: Snapshot, now: float, bind_timeout: float,
           force_after: float = 60.0, conflict_retry: float = 30.0,
           health: Mapping[str, Mapping[str, Any]] | None = None) -> Action:
    generation = job.generation
    force = _stuck(pods, snapshot, now, force_after)
    if job.finished:
        alive = tuple(p.name for p in pods if not p.finished and not p.terminating)
        return Cleanup(alive, force) if alive or force else Done()
    if job.model is None or job.request is None:
        return Invalid(PlacedReason.INVALID_SPEC, job.invalid or "invalid spec")
    request = job.request
    spec = job.model.spec
    placed = job.condition(ConditionType.PLACED)
    placement = job.placement
    if placement is None:
        stray = tuple(p.name for p in pods if not p.terminating)
        if stray or force:
            return Rollback(PlacedReason.STALE_PODS, "pods without a recorded placement", stray, force)
        try:
            # Checked before placing only: a placed job keeps running if the levels are reconfigured.
            snapshot.levels.check_tiers(request.required_tier, request.preferred_tier)
        except LevelError as e:
            return Invalid(PlacedReason.INVALID_SPEC, str(e))
        if placed is not None and placed.reason == PlacedReason.INVALID_SPEC and \
                placed.observed_generation == generation and placed.message.startswith(REFUSED_PREFIX):
            return Wait()  # the API server refused its pods; holds nothing until the spec changes
        if placed is not None and placed.reason == PlacedReason.NAME_CONFLICT and \
                _since(placed.last_transition_time, now) < conflict_retry:
            return Wait()
        return Queue(request)
    mine = {p.name: p for p in pods if p.placement_id == placement.id}
    stale = tuple(p.name for p in pods if p.name not in mine and not p.terminating)
    wanted = {r.pod or "": r for r in placement.ranks}
    if placed is None or placed.reason != PlacedReason.RELEASED:
        # Placement recorded but not released: a previous leader stopped mid-way. Finish it if the
        # nodes are still usable, else roll back and re-queue.
        for rank in placement.ranks:
            if not snapshot.has_node(rank.node):
                return Rollback(PlacedReason.NODE_LOST, f"node {rank.node} of rank {rank.rank} is gone or not usable",
                                tuple(mine) + stale, force)
        return Resume(tuple(sorted(set(wanted) - set(mine))), stale, force)
    # Released: watch the gang. A lost node comes first: its pods may fail or vanish as a consequence,
    # which is an infrastructure restart, not a failure of the job.
    if health is not None:
        tolerations = list(request.pod_spec.get("tolerations") or [])
        losses = node_losses(placement, tolerations, health, now, spec.fault_policy.node_loss_grace_seconds)
        if losses:
            return Restart(losses[0].reason, "; ".join(loss.message for loss in losses), request, losses)
    # A pod evicted or preempted (DisruptionTarget), or deleted by someone else, is an infrastructure
    # restart on the same nodes: not the training process's fault. "Gone" only after the pod was
    # observed and then deleted (DELETED event or a re-list): the state holds every pod from the
    # moment its creation was answered.
    disrupted = [p for p in wanted if p in mine and mine[p].disruption]
    if disrupted:
        pod = mine[disrupted[0]]
        return Restart(RestartReason.POD_DISRUPTED, f"pod {pod.name} was disrupted: {pod.disruption}", request)
    gone = [p for p in wanted if p not in mine]
    if gone:
        return Restart(RestartReason.POD_DELETED, f"pod {gone[0]} of the gang was deleted", request)
    failed = [p for p in wanted if mine[p].phase == "Failed"]
    if failed:
        pod = mine[failed[0]]
        why = f"pod {failed[0]} failed: {pod.terminated or 'pod failed'}"
        policy = spec.fault_policy
        if pod.exit_code is not None and pod.exit_code in policy.non_retryable_exit_codes:
            return Finish(False, FinishReason.NON_RETRYABLE_EXIT,
                          f"{why} (exit code {pod.exit_code} is non-retryable)")
        done = job.status.process_restarts
        if done >= policy.max_restarts:
            return Finish(False, FinishReason.POD_FAILED,
                          f"{why} (after {done} restarts; maxRestarts {policy.max_restarts})")
        # A failure of the training process on a healthy node: the whole gang restarts in place.
        return Restart(RestartReason.PROCESS_FAILED, why, request, counted=True)
    phases = [mine[p].phase for p in wanted]
    if all(ph == "Succeeded" for ph in phases):
        return Finish(True, FinishReason.ALL_SUCCEEDED, f"all {len(wanted)} replicas succeeded")
    unbound = [p for p in wanted if not mine[p].node_name]
    # Bind progress counts: kube-scheduler binds a 1,024-pod gang for a while on a busy cluster; only a
    # gang where nothing was bound for bind_timeout is re-planned.
    released_at = placed.last_transition_time.timestamp() if placed.last_transition_time else now
    last_progress = max([released_at] + [epoch(mine[p].scheduled_at, 0) for p in wanted if mine[p].scheduled_at])
    if unbound and not any(mine[p].gated for p in wanted) and now - last_progress > bind_timeout:
        nodes = tuple(sorted({wanted[p].node for p in unbound}))
        return Rollback(PlacedReason.BIND_TIMEOUT,
                        f"{len(unbound)} pods not bound {bind_timeout:.0f}s after release (e.g. {unbound[0]} on "
                        f"{wanted[unbound[0]].node}); re-planning the gang without nodes {', '.join(nodes)}",
                        tuple(mine) + stale, force, nodes)
    running = all(ph == "Running" for ph in phases)
    if running and not job.is_true(ConditionType.RUNNING):
        return MarkRunning(f"all {len(wanted)} replicas running")
    desired = spec.replicas
    if len(wanted) != desired and running:
        return Resize(RestartReason.SCALE_UP if desired > len(wanted) else RestartReason.SCALE_DOWN,
                      f"{len(wanted)} -> {desired} replicas", request)
    if any(mine[p].gated for p in wanted):
        return Resume()  # the release was interrupted
    if force:
        return Cleanup(force=force)
    return Wait()


def _since(stamp: Any, now: float) -> float:
    return now - stamp.timestamp() if stamp is not None else 0.0
