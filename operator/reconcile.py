"""What a TrainingJob needs next: a pure function of the job, its pods, the snapshot and the time.

The placer (the only API caller for jobs) turns each Action into API calls.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from railyard.operator import conditions as cond
from railyard.operator.builders import pod_labels
from railyard.operator.views import PodView
from railyard.topology.affinity import template_problem
from railyard.topology.api import TrainingJob
from railyard.topology.documents import format_validation
from railyard.topology.faults import NodeLoss, node_loss
from railyard.topology.levels import LevelError
from railyard.topology.model import Snapshot
from railyard.topology.request import GangRequest
from railyard.topology.timestamps import epoch

RELEASED = "Released"
PLACING = "Placing"
INVALID_SPEC = "InvalidSpec"
REFUSED_PREFIX = "the API server refused"  # an InvalidSpec from a create the API server refused
NAME_CONFLICT = "NameConflict"


class Kind(enum.Enum):
    DONE = "done"  # nothing to do, ever again (finished)
    WAIT = "wait"  # nothing to do now
    QUEUE = "queue"  # needs a placement
    INVALID = "invalid"  # spec cannot be placed: say so, hold nothing
    RESUME = "resume"  # finish a recorded placement (create missing pods, release)
    ROLLBACK = "rollback"  # drop the placement and its pods, re-queue
    CLEANUP = "cleanup"  # delete what is left of a finished gang
    SUCCEED = "succeed"
    FAIL = "fail"
    RUNNING = "running"
    RESTART = "restart"  # nodes under a released gang are lost: replace them, restart every rank
    RESIZE = "resize"  # an elastic gang's size differs from spec.replicas: grow or shrink it (a new generation)


@dataclass(frozen=True)
class Action:
    kind: Kind
    reason: str = ""
    message: str = ""
    pods: tuple[str, ...] = field(default=())  # pod names the action concerns (to delete / to create)
    request: GangRequest | None = None  # the validated request, for QUEUE and RESTART
    force: tuple[str, ...] = field(default=())  # pods to delete with grace 0 (stuck on a gone node)
    avoid: tuple[str, ...] = field(default=())  # nodes to avoid for a while (ROLLBACK after BindTimeout)
    losses: tuple[NodeLoss, ...] = field(default=())  # RESTART: which nodes are lost and why
    stale: tuple[str, ...] = field(default=())  # RESUME: pods of an older placement, deleted first
    counted: bool = False  # RESTART: a failure of the training process (counts against maxRestarts, backs off)


def seconds_since(timestamp: str | None, now: float) -> float:
    return now - epoch(timestamp, now)


def _stuck(pods: list[PodView], snapshot: Snapshot, now: float, force_after: float) -> tuple[str, ...]:
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


def lost_nodes(placement: dict[str, Any], tolerations: list[dict[str, Any]], health: Mapping[str, Mapping[str, Any]],
               now: float, grace: float) -> tuple[NodeLoss, ...]:
    """The placement's nodes whose ranks count as lost now (see topology.faults)."""
    held: dict[str, int] = {}
    for r in placement.get("ranks") or []:
        held[r["node"]] = held.get(r["node"], 0) + len(r.get("gpus") or [])
    losses = (node_loss(name, health.get(name), gpus, tolerations, now, grace) for name, gpus in sorted(held.items()))
    return tuple(loss for loss in losses if loss is not None)


def assess(job: dict[str, Any], pods: list[PodView], snapshot: Snapshot, now: float, bind_timeout: float,
           force_after: float = 60.0, conflict_retry: float = 30.0,
           health: Mapping[str, Mapping[str, Any]] | None = None) -> Action:
    status = job.get("status") or {}
    conditions = status.get("conditions") or []
    generation = job["metadata"].get("generation")
    force = _stuck(pods, snapshot, now, force_after)
    if cond.is_true(conditions, cond.SUCCEEDED) or cond.is_true(conditions, cond.FAILED):
        alive = tuple(p.name for p in pods if not p.finished and not p.terminating)
        return Action(Kind.CLEANUP, pods=alive, force=force) if alive or force else Action(Kind.DONE)
    try:
        model = TrainingJob.model_validate(job)
        request = GangRequest.from_job(model)
    except ValidationError as e:
        return Action(Kind.INVALID, INVALID_SPEC, format_validation(e))
    except ValueError as e:
        return Action(Kind.INVALID, INVALID_SPEC, f"spec.template: {e}")
    problem = template_problem(request.pod_spec, pod_labels(job))
    if problem:
        return Action(Kind.INVALID, INVALID_SPEC, f"spec.template.spec.{problem}")
    placed = cond.get(conditions, cond.PLACED) or {}
    placement = status.get("placement") or {}
    if not placement.get("ranks"):
        stray = tuple(p.name for p in pods if not p.terminating)
        if stray or force:
            return Action(Kind.ROLLBACK, "StalePods", "pods without a recorded placement", stray, force=force)
        try:
            # Checked before placing only: a placed job keeps running if the levels are reconfigured.
            snapshot.levels.check_tiers(request.required_tier, request.preferred_tier)
        except LevelError as e:
            return Action(Kind.INVALID, INVALID_SPEC, str(e))
        if placed.get("reason") == INVALID_SPEC and placed.get("observedGeneration") == generation and \
                placed.get("message", "").startswith(REFUSED_PREFIX):
            return Action(Kind.WAIT)  # the API server refused its pods; holds nothing until the spec changes
        if placed.get("reason") == NAME_CONFLICT and seconds_since(placed.get("lastTransitionTime"), now) < \
                conflict_retry:
            return Action(Kind.WAIT)
        return Action(Kind.QUEUE, request=request)
    placement_id = placement.get("id", "")
    mine = {p.name: p for p in pods if p.placement_id == placement_id}
    stale = tuple(p.name for p in pods if p.name not in mine and not p.terminating)
    wanted = {r["pod"]: r for r in placement["ranks"]}
    if placed.get("reason") != RELEASED:
        # Placement recorded but not released: a previous leader stopped mid-way. Finish it if the
        # nodes are still usable, else roll back and re-queue.
        for rank in placement["ranks"]:
            if not snapshot.has_node(rank["node"]):
                return Action(Kind.ROLLBACK, "NodeLost", f"node {rank['node']} of rank {rank['rank']} is gone or "
                              "not usable", tuple(mine) + stale, force=force)
        missing = tuple(sorted(set(wanted) - set(mine)))
        return Action(Kind.RESUME, PLACING, "", missing, stale=stale, force=force)
    # Released: watch the gang. A lost node comes first: its pods may fail or vanish as a consequence,
    # which is an infrastructure restart, not a failure of the job.
    if health is not None:
        tolerations = list(request.pod_spec.get("tolerations") or [])
        losses = lost_nodes(placement, tolerations, health, now, model.spec.fault_policy.node_loss_grace_seconds)
        if losses:
            return Action(Kind.RESTART, losses[0].reason, "; ".join(loss.message for loss in losses),
                          request=request, losses=losses)
    # A pod evicted or preempted (DisruptionTarget), or deleted by someone else, is an infrastructure
    # restart on the same nodes: not the training process's fault. "Gone" only after the pod was
    # observed and then deleted (DELETED event or a re-list): the state holds every pod from the
    # moment its creation was answered.
    disrupted = [p for p in wanted if p in mine and mine[p].disruption]
    if disrupted:
        pod = mine[disrupted[0]]
        return Action(Kind.RESTART, "PodDisrupted", f"pod {pod.name} was disrupted: {pod.disruption}",
                      request=request)
    gone = [p for p in wanted if p not in mine]
    if gone:
        return Action(Kind.RESTART, "PodDeleted", f"pod {gone[0]} of the gang was deleted", request=request)
    failed = [p for p in wanted if p in mine and mine[p].phase == "Failed"]
    if failed:
        pod = mine[failed[0]]
        why = f"pod {failed[0]} failed: {pod.terminated or 'pod failed'}"
        policy = model.spec.fault_policy
        if pod.exit_code is not None and pod.exit_code in policy.non_retryable_exit_codes:
            return Action(Kind.FAIL, "NonRetryableExit", f"{why} (exit code {pod.exit_code} is non-retryable)")
        done = int(status.get("processRestarts") or 0)
        if done >= policy.max_restarts:
            return Action(Kind.FAIL, "PodFailed", f"{why} (after {done} restarts; maxRestarts {policy.max_restarts})")
        # A failure of the training process on a healthy node: the whole gang restarts in place.
        return Action(Kind.RESTART, "ProcessFailed", why, request=request, counted=True)
    phases = [mine[p].phase for p in wanted]
    if all(ph == "Succeeded" for ph in phases):
        return Action(Kind.SUCCEED, "AllSucceeded", f"all {len(wanted)} replicas succeeded")
    unbound = [p for p in wanted if not mine[p].node_name]
    # Bind progress counts: kube-scheduler binds a 1,024-pod gang for a while on a busy cluster; only a
    # gang where nothing was bound for bind_timeout is re-planned.
    last_progress = max([epoch(placed.get("lastTransitionTime"), now)] +
                        [epoch(mine[p].scheduled_at, 0) for p in wanted if mine[p].scheduled_at])
    if unbound and not any(mine[p].gated for p in wanted) and now - last_progress > bind_timeout:
        nodes = tuple(sorted({wanted[p]["node"] for p in unbound}))
        return Action(Kind.ROLLBACK, "BindTimeout",
                      f"{len(unbound)} pods not bound {bind_timeout:.0f}s after release (e.g. {unbound[0]} on "
                      f"{wanted[unbound[0]]['node']}); re-planning the gang without nodes {', '.join(nodes)}",
                      tuple(mine) + stale, force=force, avoid=nodes)
    if all(ph == "Running" for ph in phases) and not cond.is_true(conditions, cond.RUNNING):
        return Action(Kind.RUNNING, "AllRunning", f"all {len(wanted)} replicas running")
    desired = model.spec.replicas
    if len(wanted) != desired and all(ph == "Running" for ph in phases):
        return Action(Kind.RESIZE, "ScaleUp" if desired > len(wanted) else "ScaleDown",
                      f"{len(wanted)} -> {desired} replicas", request=request)
    if any(mine[p].gated for p in wanted):
        return Action(Kind.RESUME, PLACING, "release interrupted", ())
    if force:
        return Action(Kind.CLEANUP, force=force)
    return Action(Kind.WAIT)
