"""What a TrainingJob needs next: a pure function of the job, its pods, the snapshot, the nodes'
health and the time.

Order of the questions, each answered only when the ones before it are not:
finished (clean up) -> spec invalid -> no placement (queue, or roll back stray pods) -> placement
not released (resume, or roll back when a node is gone) -> released: node loss, a rank's pod evicted
from a cordoned node (drain), disruption, deleted pod, failed pod, success, bind timeout, running,
resize, interrupted release.

Times: `now` is the wall clock (compared only with timestamps this operator wrote); grace periods and
timeouts run on the operator's monotonic clock from when it first observed the signal (`Seen`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from railyard.operator.base.objects import Job, PodView
from railyard.operator.base.reasons import ConditionType, FinishReason, PlacedReason, RestartReason
from railyard.operator.decide.actions import (
    Action,
    Cleanup,
    Done,
    Evict,
    Finish,
    Invalid,
    MarkRunning,
    Queue,
    RecordRelease,
    Resize,
    Restart,
    Resume,
    Rollback,
    Wait,
)
from railyard.operator.decide.adopted_gangs import assess_adopted
from railyard.operator.decide.conditions import saving_for_preemption
from railyard.topology.api.job import PlacementStatus
from railyard.topology.api.timestamps import epoch
from railyard.topology.cluster.faults import LossReason, NodeHealth, NodeLoss, losses_of
from railyard.topology.cluster.levels import LevelError
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.pod_trust import carried_pod_names

REFUSED_PREFIX = "the API server refused"  # an InvalidSpec from a create the API server refused


@dataclass(frozen=True)
class Seen:
    """When this operator first observed a job's signals (monotonic seconds), and the time now."""

    now: float
    released: float | None = None  # the current placement's release
    bound: Mapping[str, float] = field(default_factory=dict)  # pod name -> first seen bound
    terminating: Mapping[str, float] = field(default_factory=dict)  # pod name -> first seen Terminating
    evicting: frozenset[str] = frozenset()  # pods of its namespace whose eviction was asked for (the webhook)
    leaving: frozenset[str] = frozenset()  # nodes it is to move off so a waiting gang fits (defragmentation)
    leaving_for: str = ""  # that gang (namespace/name)
    blocked: Mapping[str, str] = field(default_factory=dict)  # unbound pod -> why its ResourceClaim cannot be allocated
    terminating_left: float | None = None  # when a Terminating pod of the job was last seen gone
    straggler: NodeLoss | None = None  # a slow node to evict it from (its reports said so: act/report_flush.py)


def seconds_since(timestamp: str | None, now: float) -> float:
    return now - epoch(timestamp, now)


def _node_of(pod: PodView) -> str | None:
    return pod.node_name or (pod.usage.node if pod.usage else None)


def _stuck(pods: Sequence[PodView], snapshot: Snapshot, now: float, force_after: float,
           seen: Seen | None, health: Mapping[str, NodeHealth] | None) -> tuple[str, ...]:
    """Terminating pods no kubelet will ever finish, so only a forced delete frees the name (and the
    GPUs): on a node that is gone or out-of-service at once, on a node NotReady for `force_after`
    (observed). With no health to go by (a one-shot caller), those Terminating for `force_after` on a
    node the snapshot does not have."""
    out = []
    for p in pods:
        if not p.terminating:
            continue
        node = _node_of(p)
        if health is not None and seen is not None:
            if _never_finishes(health.get(node) if node is not None else None, seen.now, force_after):
                out.append(p.name)
            continue
        waited = seconds_since(p.deleted_at, now)
        if waited >= force_after and (node is None or not snapshot.has_node(node)):
            out.append(p.name)
    return tuple(out)


def _never_finishes(h: NodeHealth | None, now: float, force_after: float) -> bool:
    if h is None or h.out_of_service:
        return True
    return not h.ready and h.not_ready_seen is not None and now - h.not_ready_seen >= force_after


def node_losses(placement: PlacementStatus, tolerations: Sequence[Mapping[str, Any]],
                health: Mapping[str, NodeHealth], now: float, grace: float) -> tuple[NodeLoss, ...]:
    """The placement's nodes whose ranks count as lost now (see topology.faults; `now` monotonic)."""
    held: dict[str, int] = {}
    for r in placement.ranks:
        held[r.node] = held.get(r.node, 0) + len(r.gpus)
    return losses_of(held, health, tolerations, now, grace)


def _drained(job_pods: Sequence[str], placement: PlacementStatus, health: Mapping[str, NodeHealth],
             why: str) -> tuple[NodeLoss, ...]:
    """Ranks whose pod was evicted or deleted on a node being drained (cordoned, or tainted by an autoscaler):
    that is a drain, and the node is not the rank's home any more (it is replaced, never pinned back)."""
    nodes = {r.node for r in placement.ranks if (r.pod or "") in job_pods}
    return tuple(NodeLoss(n, LossReason.DRAINED, f"node {n} is being drained and its rank's pod {why}", None)
                 for n in sorted(nodes) if (h := health.get(n)) is not None and h.draining)


def _maintenance(placement: PlacementStatus, health: Mapping[str, NodeHealth],
                 evicting: frozenset[str]) -> tuple[NodeLoss, ...]:
    """Nodes of the gang under planned maintenance: announced on the node, or being drained (cordoned or
    tainted by an autoscaler, and an eviction of a rank's pod there was asked for and held by the eviction
    webhook)."""
    found: dict[str, str] = {}
    for rank in placement.ranks:
        h = health.get(rank.node)
        if h is None or rank.node in found:
            continue
        if h.maintenance is not None:
            found[rank.node] = f"node {rank.node} is announced for maintenance ({h.maintenance})"
        elif h.draining and (rank.pod or "") in evicting:
            found[rank.node] = f"node {rank.node} is being drained (eviction of rank {rank.rank}'s pod asked for)"
    return tuple(NodeLoss(n, LossReason.MAINTENANCE, why, None) for n, why in sorted(found.items()))


def steady(job: Job, pods: Sequence[PodView], health: Mapping[str, NodeHealth]) -> bool:
    """A released, Running gang with every pod running and none on its way out, whose nodes are
    pristine: no signal on any of them that time alone could turn into a loss (a node not Ready
    inside its grace, allocatable GPUs dropped), none cordoned or announced for maintenance.
    For such a job `assess` says Wait until the job, one of its pods or a node changes (an eviction
    asked for matters only on a cordoned node) — the loop skips it until then (a pass looked at every
    running gang's every rank)."""
    placement, placed = job.placement, job.condition(ConditionType.PLACED)
    if placement is None or placed is None or placed.reason != PlacedReason.RELEASED or \
            not job.is_true(ConditionType.RUNNING) or job.request is None or \
            len(placement.ranks) != (job.spec.replicas if job.spec is not None else -1):
        return False
    if any(p.terminating or p.phase != "Running" or p.placement_id != placement.id for p in pods):
        return False
    tolerations = list(job.request.pod_spec.get("tolerations") or [])
    if node_losses(placement, tolerations, health, float("inf"), 0.0):
        return False
    return not any((h := health.get(n)) is None or h.draining or h.maintenance is not None
                   for n in {r.node for r in placement.ranks})


def assess(job: Job, pods: Sequence[PodView], snapshot: Snapshot, now: float, bind_timeout: float,
           force_after: float = 60.0, conflict_retry: float = 30.0,
           health: Mapping[str, NodeHealth] | None = None, seen: Seen | None = None,
           record_release_after: float = 10.0) -> Action:
    """What the job needs next. `record_release_after`: how long a release this operator made (seen.released,
    not yet in the status) waits for the gang to run before it is recorded on its own (RecordRelease)."""
    action = _assess(job, pods, snapshot, now, bind_timeout, force_after, conflict_retry, health, seen,
                     record_release_after)
    placed = job.condition(ConditionType.PLACED)
    unrecorded = seen is not None and seen.released is not None and job.placement is not None and \
        (placed is None or placed.reason != PlacedReason.RELEASED)
    if unrecorded and isinstance(action, Restart | Finish | Rollback | Resize):
        # The release goes into the status first (the next pass decides again): a restart's backoff
        # and a finished job's conditions read it there.
        action = RecordRelease()
    if saving_for_preemption(job) and not isinstance(action, Finish | Cleanup | Done | Invalid):
        return Evict()  # a marked victim: whatever else it needs waits for its eviction (or its reprieve)
    return action


def _assess(job: Job, pods: Sequence[PodView], snapshot: Snapshot, now: float, bind_timeout: float,
            force_after: float, conflict_retry: float, health: Mapping[str, NodeHealth] | None,
            seen: Seen | None, record_release_after: float) -> Action:
    if job.spec is not None and job.spec.adopt is not None:
        return time_limit_exceeded(job) if job.past_deadline(now) and not job.finished else assess_adopted(job, pods)
    generation = job.generation
    force = _stuck(pods, snapshot, now, force_after, seen, health)
    if job.finished:
        alive = tuple(p.name for p in pods if not p.finished and not p.terminating)
        return Cleanup(alive, force) if alive or force else Done()
    if job.model is None or job.request is None:
        return Invalid(PlacedReason.INVALID_SPEC, job.invalid or "invalid spec")
    request = job.request
    spec = job.model.spec
    placed = job.condition(ConditionType.PLACED)
    placement = job.placement
    if job.past_deadline(now):
        return time_limit_exceeded(job)
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
        if placed is not None and placed.reason == PlacedReason.NAMESPACE_TERMINATING:
            return Wait()  # it goes with its namespace; nothing can be created there any more
        if placed is not None and placed.reason in (PlacedReason.NAME_CONFLICT, PlacedReason.QUOTA_EXCEEDED) and \
                _since(placed.last_transition_time, now) < conflict_retry:
            return Wait()  # retried after a while: someone else's object, or a namespace quota now full
        return Queue(request)
    wanted = {r.pod or "": r for r in placement.ranks}
    # An in-place restart's kept pods are this placement's before act/materialiser labels them so.
    carried = carried_pod_names(job.name, placement)
    mine = {p.name: p for p in pods if p.placement_id == placement.id or p.name in carried}
    stale = tuple(p.name for p in pods if p.name not in mine and not p.terminating)
    recorded = placed is not None and placed.reason == PlacedReason.RELEASED
    if not recorded and (seen is None or seen.released is None):
        # Placement recorded but not released: a previous leader stopped mid-way. Finish it if the
        # nodes are still usable, else roll back and re-queue. (Released by this operator and not
        # recorded yet — seen.released — is released: see RecordRelease.)
        for rank in placement.ranks:
            if not snapshot.has_node(rank.node):
                return Rollback(PlacedReason.NODE_LOST, f"node {rank.node} of rank {rank.rank} is gone or not usable",
                                tuple(mine) + stale, force)
        if not stale and not force and set(wanted) <= set(mine) and not any(p.gated for p in mine.values()):
            return RecordRelease()  # every pod exists, ungated: released by a predecessor that did not record it
        return Resume(tuple(sorted(set(wanted) - set(mine))), stale, force)
    # Released: watch the gang. A lost node comes first: its pods may fail or vanish as a consequence,
    # which is an infrastructure restart, not a failure of the job.
    mono = seen.now if seen is not None else now
    if health is not None:
        tolerations = list(request.pod_spec.get("tolerations") or [])
        losses = node_losses(placement, tolerations, health, mono, spec.fault_policy.node_loss_grace_seconds)
        if losses:
            return Restart(losses[0].reason, "; ".join(loss.message for loss in losses), request, losses)
    # A pod evicted or preempted (DisruptionTarget), or deleted by someone else, is an infrastructure
    # restart: not the training process's fault. On a cordoned node that is a drain: the rank moves.
    # "Gone" only after the pod was observed and then deleted (DELETED event or a re-list): the state
    # holds every pod from the moment its creation was answered.
    disrupted = [p for p in wanted if p in mine and mine[p].disruption]
    gone = [p for p in wanted if p not in mine]
    deleting = [p for p in wanted if p in mine and mine[p].terminating]  # a rank on its way out: the gang's over
    if disrupted or gone or deleting:
        drained = _drained([*disrupted, *gone, *deleting], placement, health or {}, "was evicted or deleted")
        if drained:
            return Restart(LossReason.DRAINED, "; ".join(d.message for d in drained), request, drained)
    if disrupted:
        pod = mine[disrupted[0]]
        return Restart(RestartReason.POD_DISRUPTED, f"pod {pod.name} was disrupted: {pod.disruption}", request)
    if gone or deleting:
        name = (gone or deleting)[0]
        what = "deleted" if gone else "being deleted"
        return Restart(RestartReason.POD_DELETED, f"pod {name} of the gang was {what}", request)
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
    # Planned maintenance: the gang saves a step (act/recovery) and its ranks there move, so the drain
    # completes; the node is the admin's and is not quarantined.
    planned = _maintenance(placement, health or {}, seen.evicting if seen is not None else frozenset())
    if planned:
        return Restart(LossReason.MAINTENANCE, "; ".join(p.message for p in planned), request, planned)
    if seen is not None and (moving := sorted({r.node for r in placement.ranks} & seen.leaving)):
        why = f"moved off {', '.join(moving)} so {seen.leaving_for} fits in one domain"
        return Restart(LossReason.MIGRATION, why, request,
                       tuple(NodeLoss(n, LossReason.MIGRATION, why, None) for n in moving))
    if seen is not None and seen.straggler is not None and any(r.node == seen.straggler.node for r in placement.ranks):
        return Restart(LossReason.STRAGGLER, seen.straggler.message, request, (seen.straggler,))
    unbound = [p for p in wanted if not mine[p].node_name]
    blocked = {p: seen.blocked[p] for p in unbound if p in seen.blocked} if seen is not None else {}
    if blocked and not any(mine[p].gated for p in wanted):
        # A device the claim pins is someone else's (allocated after the solve) or gone: no wait can help.
        first, why = min(blocked.items())
        return Rollback(PlacedReason.DEVICE_UNAVAILABLE, f"rank {wanted[first].rank}'s ResourceClaim cannot be "
                        f"allocated: {why}; re-planning the gang", tuple(mine) + stale, force)
    if unbound and not any(mine[p].gated for p in wanted):
        placed_at = placed.last_transition_time if placed is not None else None
        stalled = _stalled(unbound, wanted, pods, placement, placed_at, now, seen, bind_timeout)
        if stalled:
            nodes = tuple(sorted({wanted[p].node for p in stalled}))
            return Rollback(PlacedReason.BIND_TIMEOUT,
                            f"{len(stalled)} pods not bound {bind_timeout:.0f}s after release (e.g. {stalled[0]} on "
                            f"{wanted[stalled[0]].node}); re-planning the gang without nodes {', '.join(nodes)}",
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
    if not recorded and seen is not None and seen.released is not None and \
            seen.now - seen.released >= record_release_after:
        return RecordRelease()
    if force:
        return Cleanup(force=force)
    return Wait()


def time_limit_exceeded(job: Job) -> Finish:
    """The gang ran for its declared limit: it ends (placement trusted the limit)."""
    limit = job.spec.time_limit_seconds if job.spec is not None else None
    deadline = job.deadline
    return Finish(False, FinishReason.TIME_LIMIT_EXCEEDED,
                  f"ran for its time limit, spec.timeLimitSeconds={limit}, placed at "
                  f"{job.status.placed_at.isoformat() if job.status.placed_at else '?'}: ended at "
                  f"{deadline.isoformat() if deadline else '?'}")


def _stalled(unbound: list[str], wanted: Mapping[str, Any], pods: Sequence[PodView], placement: PlacementStatus,
             placed_at: Any, now: float, seen: Seen | None, bind_timeout: float) -> list[str]:
    """Unbound ranks with no bind progress of the gang for `bind_timeout` since its release. A rank
    whose node still holds a Terminating pod of the job waits for its predecessor (a checkpoint on
    SIGTERM takes minutes), it is not stalled. Bind progress counts: kube-scheduler binds a 1,024-pod
    gang for a while on a busy cluster; only a gang where nothing was bound for the timeout is
    re-planned. A predecessor leaving counts as progress too: the ranks it held back bind only from
    then (kwok behind 50,000 pods took 8 min to delete a 1,024-rank gang's old pods, and the restart
    was rolled back 15 s after they left)."""
    predecessors = {_node_of(p) for p in pods if p.terminating and p.placement_id != placement.id}
    candidates = [p for p in unbound if wanted[p].node not in predecessors]
    if not candidates:
        return []
    if seen is not None:  # observed on the monotonic clock
        start = seen.released if seen.released is not None else seen.now
        left = [seen.terminating_left] if seen.terminating_left is not None else []
        last = max([start, *left, *(seen.bound[p] for p in wanted if p in seen.bound)])
        idle = seen.now - last
    else:  # timestamps only (a one-shot caller without observations)
        start = placed_at.timestamp() if placed_at is not None else now
        idle = now - max([start] + [epoch(p.scheduled_at, 0) for p in pods if p.placement_id == placement.id
                                    and p.scheduled_at])
    return candidates if idle > bind_timeout else []


def _since(stamp: Any, now: float) -> float:
    return now - stamp.timestamp() if stamp is not None else 0.0
