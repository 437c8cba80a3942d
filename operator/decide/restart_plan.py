"""Restarting a released gang, decided: when (`restart_gate`: the circuit breaker, a planned move's checkpoint,
the debounce of losses close together, the back-off and hourly cap of infrastructure restarts), with whose
spare nodes (`plan_spares`: hot spares lent to backfilling jobs reclaimed), and how (`plan_restart`: every
healthy rank keeps its node, GPUs and rank; the lost ranks get replacements next to where they were; lost
nodes are quarantined within the operator's limits; without a replacement the healthy ranks wait
`replacementTimeoutSeconds`, then onNoReplacement applies — shrink, requeue or fail). Pure: act/recovery.py
carries each answer out (writes the attempt ahead, deletes the old pods, taints nodes, says so in Events)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from railyard.operator.base.clock import utc
from railyard.operator.base.keys import LABEL_RESTART
from railyard.operator.base.objects import Job, Key, PodView
from railyard.operator.base.reasons import ConditionStatus, ConditionType, RecoveryReason
from railyard.operator.base.settings import Settings
from railyard.operator.decide.actions import Restart
from railyard.operator.decide.conditions import saving_for_preemption as saving
from railyard.operator.decide.holds import Hold, held_for_others
from railyard.operator.decide.policy import (
    NoReplacementStep,
    failure_streak,
    force_delete,
    infra_backoff,
    no_replacement_step,
    quarantines,
    restart_delay,
)
from railyard.operator.decide.preemption_rules import lost_gpu_seconds
from railyard.operator.decide.priority import PriorityClassView, ranked_priority, resolve
from railyard.operator.decide.quarantine_limits import HOUR, Limits, lasting, room, straggler_quarantine_allowed
from railyard.topology.api.job import QuarantineRecord, RestartStrategy, StragglerPolicy, UnhealthyNode
from railyard.topology.api.timestamps import parse_time
from railyard.topology.cluster.affinity import PodInfo
from railyard.topology.cluster.faults import LossReason, NodeHealth, NodeLoss
from railyard.topology.cluster.model import Exclusion, GpuNode, Snapshot
from railyard.topology.cluster.pod_trust import is_carried, pod_name
from railyard.topology.solver.decision import inter_pod_limits
from railyard.topology.solver.elastic import choose_shrink, largest_valid
from railyard.topology.solver.replace import RankSlot, solve_replacement

PLANNED = (LossReason.MAINTENANCE, LossReason.MIGRATION)  # save a step first; no back-off, no cap
EVICTIONS_KEPT = 16  # status.stragglerEvictions: enough for any hourly cap an admin sets sensibly
UNHEALTHY_KEPT = 32  # status.unhealthyNodes: current losses and the most recent others (the CRD allows 64)


# --- when ----------------------------------------------------------------------------------------------

class GateKind(enum.Enum):
    GO = "go"
    DEBOUNCE = "debounce"  # losses close together make one restart; a process failure waits its back-off
    CAPPED = "capped"  # infrastructure restarts hit the hourly cap (Degraded=RestartCap)


@dataclass(frozen=True)
class RestartMemory:
    """What a job's memory keeps for its restarts (cache/memory.JobMemory's fields), as a value."""

    losses_seen_at: float | None = None  # monotonic: when its first unhandled loss was seen
    infra_restarts: tuple[float, ...] = ()  # monotonic: its infrastructure restarts of the last hour
    failure_streak: int = 0  # process failures in a row, each after a short attempt


@dataclass(frozen=True)
class Gate:
    kind: GateKind
    wait: float = 0.0  # seconds until it is asked again
    memory: RestartMemory = field(default_factory=RestartMemory)  # the values to remember from now
    streak: int = 0  # the failure streak this restart counts in
    message: str = ""  # CAPPED: what Degraded says


def saves_first(action: Restart, settings: Settings) -> float | None:
    """A planned move (maintenance, defragmentation) asks every rank to save a step first: how long it waits
    for that step; None for a fault."""
    if action.reason == LossReason.MIGRATION:
        return settings.preemption.checkpoint_seconds
    if action.reason == LossReason.MAINTENANCE:
        return settings.maintenance.checkpoint_seconds
    return None


def partitioned(action: Restart, breaker_tripped: bool) -> bool:
    """NotReady losses while the circuit breaker holds are a partition, not a fault: nothing restarts."""
    return breaker_tripped and any(loss.reason == LossReason.NODE_NOT_READY for loss in action.losses)


def restart_gate(job: Job, action: Restart, memory: RestartMemory, attempt_ran: float | None, mono: float,
                 settings: Settings) -> Gate:
    """Whether the restart goes now (once not partitioned, and a planned move's step saved: its actor's to
    wait for first)."""
    seen = memory.losses_seen_at if memory.losses_seen_at is not None else mono
    streak = failure_streak(memory.failure_streak, attempt_ran)
    delay = restart_delay(action, job.fault_policy, streak, settings.faults.loss_debounce_seconds,
                          settings.faults.not_ready_debounce_seconds)
    wait = delay - (mono - seen)
    kept = RestartMemory(seen, memory.infra_restarts, memory.failure_streak)
    # A planned move goes at the admin's pace: the storm brake is for faults.
    if not action.counted and action.reason not in PLANNED:
        recent = tuple(t for t in memory.infra_restarts if mono - t < HOUR)
        kept = RestartMemory(seen, recent, memory.failure_streak)
        if len(recent) >= settings.faults.infra_restarts_per_hour:
            message = (f"{len(recent)} infrastructure restarts in the last hour (RAILYARD_INFRA_RESTARTS_PER_HOUR); "
                       "the next waits until the oldest is an hour old")
            return Gate(GateKind.CAPPED, max(1.0, HOUR - (mono - recent[0])), kept, streak, message)
        if recent:
            faults = settings.faults
            backoff = infra_backoff(len(recent), faults.infra_backoff_seconds, faults.infra_backoff_max_seconds)
            wait = max(wait, backoff - (mono - recent[-1]))
    if wait > 0:
        return Gate(GateKind.DEBOUNCE, wait, kept, streak)
    return Gate(GateKind.GO, 0.0, kept, streak)


def after_restart(memory: RestartMemory, action: Restart, gate: Gate, restarted: bool, mono: float) -> RestartMemory:
    """The values to remember once the restart was carried out (or is waiting for a replacement)."""
    if not restarted:
        return RestartMemory(None, memory.infra_restarts, memory.failure_streak)
    if action.counted:
        return RestartMemory(None, memory.infra_restarts, gate.streak + 1)
    if action.reason in PLANNED:
        return RestartMemory(None, memory.infra_restarts, memory.failure_streak)
    return RestartMemory(None, (*memory.infra_restarts, mono), memory.failure_streak)


# --- with whose spares ---------------------------------------------------------------------------------

class SpareKind(enum.Enum):
    NONE = "none"  # replace from what is free
    WAIT = "wait"  # the spares reclaimed for it are still being left
    RECLAIM = "reclaim"  # evict these backfilling jobs (checkpoint first) and hold their nodes for it


@dataclass(frozen=True)
class Spares:
    kind: SpareKind
    victims: tuple[Key, ...] = ()
    hold: Hold | None = None
    message: str = ""


def plan_spares(job: Job, action: Restart, jobs: Mapping[Key, Job], classes: Mapping[str, PriorityClassView],
                snapshot: Snapshot, models: Mapping[str, GpuNode], job_pods: Callable[[Key], Sequence[PodView]],
                last_saved: Callable[[Job], float | None], hold: Hold | None, mono: float, now: float,
                settings: Settings) -> Spares:
    """A running gang lost these nodes and its TORs' hot spares are lent to backfilling jobs: evict those
    (the least work lost first) and hold their nodes for it; WAIT while the reclaimed ones are still there.
    A planned move (defragmentation) lands outside nodes held for its waiting gang, never on reclaimed spares."""
    lost = [loss.node for loss in action.losses]
    if settings.spares.per_tor <= 0 or not lost or action.reason == LossReason.MIGRATION:
        return Spares(SpareKind.NONE)
    if hold is not None and hold.spare:
        if mono >= hold.until:
            return Spares(SpareKind.NONE)  # they did not go in time: replace from what is free
        gone = all(not any(p.node_name in hold.nodes for p in job_pods(_key(v))) for v in hold.victims)
        return Spares(SpareKind.NONE if gone else SpareKind.WAIT)
    need: dict[str, int] = {}
    for name in lost:
        if (model := models.get(name)) is not None:
            need[model.tor] = need.get(model.tor, 0) + 1
    free: dict[str, int] = {}
    for node in snapshot.nodes:
        if node.name not in lost and node.tor in need and len(snapshot.free(node)) == node.gpu_count:
            free[node.tor] = free.get(node.tor, 0) + 1
    missing = {tor: count - free.get(tor, 0) for tor, count in need.items() if free.get(tor, 0) < count}
    if not missing:
        return Spares(SpareKind.NONE)
    own = resolve(job.priority_class_name, classes)
    options: list[tuple[float, str, Job, set[str]]] = []
    for key, other in jobs.items():
        if key == job.key or other.placement is None or other.spec is None or saving(other) or \
                other.finished or other.deleting or not other.spec.preemption.backfill_spares:
            continue
        # A backfiller took the spares on the promise to give them back when a replacement needs them: the
        # hourly preemption cap (which protects gangs from being evicted for others' first placements) does
        # not shield it from that.
        if own is None or ranked_priority(other, classes) > own.value:
            continue
        whole = {r.node for r in other.placement.ranks if (m := models.get(r.node)) is not None
                 and m.tor in missing and len(r.gpus) == m.gpu_count}
        if whole:
            gpus = sum(len(r.gpus) for r in other.placement.ranks)
            options.append((lost_gpu_seconds(gpus, last_saved(other), now), f"{key}", other, whole))
    victims: list[Job] = []
    nodes: set[str] = set()
    for _, _, other, whole in sorted(options, key=lambda o: (o[0], o[1])):  # the least work lost first
        if all(sum(1 for n in nodes if models[n].tor == tor) >= count for tor, count in missing.items()):
            break
        victims.append(other)
        nodes |= whole
    if not victims:
        return Spares(SpareKind.NONE)
    names = tuple(f"{v.namespace}/{v.name}" for v in victims)
    message = (f"preempted by {job.namespace}/{job.name}: it lost nodes in TOR {', '.join(sorted(missing))} and needs "
               f"the hot spares this job backfilled; its ranks save a step first (at most "
               f"{settings.preemption.checkpoint_seconds:.0f}s), then it is requeued")
    return Spares(SpareKind.RECLAIM, tuple(v.key for v in victims),
                  Hold(frozenset(nodes), names, mono + settings.preemption.hold_seconds, spare=True), message)


def _key(text: str) -> Key:
    namespace, _, name = text.partition("/")
    return (namespace, name)


# --- how -----------------------------------------------------------------------------------------------

class RestartKind(enum.Enum):
    RESTART = "restart"  # a new attempt: lost ranks replaced (or the same nodes, without losses)
    SHRINK = "shrink"  # onNoReplacement Shrink: a new attempt on the survivors
    REQUEUE = "requeue"  # onNoReplacement Requeue (or a Shrink with no valid size): placed again as a whole
    FAIL = "fail"  # onNoReplacement Fail
    WAIT = "wait"  # no replacement yet: the healthy ranks keep their nodes (Degraded=NoReplacement)
    NO_ROOM = "no-room"  # a defragmentation move found no room outside the held nodes: it is called off


@dataclass(frozen=True)
class RestartInput:
    job: Job
    action: Restart
    snapshot: Snapshot  # the state's now
    models: Mapping[str, GpuNode]  # every node known (usable now, or last seen usable)
    excluded: Mapping[str, Exclusion]
    health: Mapping[str, NodeHealth]
    gpu_nodes: int  # GPU nodes known (the quarantine share's base)
    pods: Sequence[PodView]  # the job's pods
    holds: Mapping[Key, Hold]
    breaker_tripped: bool
    corroborating: Callable[[str], int]  # other jobs that find a node slow too
    straggler_quarantines: int  # straggler quarantines in the last hour, cluster-wide
    pod_infos: Callable[[], list[PodInfo]]  # for inter-pod rules (read only when the template has them)
    now: float  # wall seconds
    settings: Settings


@dataclass(frozen=True)
class RestartPlan:
    kind: RestartKind
    message: str
    losses: tuple[NodeLoss, ...] = ()
    replicas: tuple[tuple[GpuNode, tuple[int, ...]], ...] = ()  # the new attempt, in rank order
    record: Mapping[str, object] = field(default_factory=dict)  # the restart record's fields
    unhealthy: tuple[UnhealthyNode, ...] = ()
    quarantine: tuple[QuarantineRecord, ...] = ()
    skipped: tuple[str, ...] = ()  # why a loss that calls for a quarantine gets none
    new_losses: tuple[NodeLoss, ...] = ()  # losses not recorded before (NodeLost Events)
    everyone: tuple[str, ...] = ()  # the old attempt's pods to delete
    kept: Mapping[int, str] = field(default_factory=dict)  # in place: rank -> its pod, kept into the new attempt
    on_lost: tuple[str, ...] = ()  # of those, the ones to delete with grace 0 (no kubelet will answer)
    replacements: tuple[dict[str, object], ...] = ()
    straggler_evictions: tuple[datetime, ...] | None = None
    lost_names: tuple[str, ...] = ()
    retry: float = 0.0  # WAIT: seconds until the search is tried again
    waiting_write: bool = False  # WAIT: Degraded=NoReplacement to write (first time, or the losses changed)
    replacement_timeout: int = 0


def plan_quarantine(job: Job, losses: Sequence[NodeLoss], straggling: StragglerPolicy | None,
                    health: Mapping[str, NodeHealth], gpu_nodes: int, models: Mapping[str, GpuNode],
                    corroborating: Callable[[str], int], straggler_quarantines: int, breaker_tripped: bool,
                    now: float, settings: Settings) -> tuple[list[QuarantineRecord], list[str]]:
    """The quarantines these losses call for and the limits allow, to record; and why each other loss that
    calls for one gets none."""
    if not settings.quarantine.enabled or breaker_tripped:
        return [], []
    limits = Limits.of(settings.quarantine)
    quarantined = sum(1 for h in health.values() if h.quarantined)
    left = room(quarantined, gpu_nodes, limits)
    records: list[QuarantineRecord] = []
    skipped: list[str] = []
    recent = straggler_quarantines
    for loss in losses:
        if not quarantines(loss.reason) or loss.node not in health:
            continue
        seconds = lasting(None, settings.quarantine.seconds, limits)
        if loss.reason == LossReason.STRAGGLER:
            model = models.get(loss.node)
            placement = job.placement
            held = sum(len(r.gpus) for r in placement.ranks if r.node == loss.node) if placement is not None else 0
            why = straggler_quarantine_allowed(model is not None and held >= model.gpu_count,
                                               corroborating(loss.node), recent, limits)
            if why is not None:
                skipped.append(f"{loss.node} not quarantined: {why}")
                continue
            seconds = lasting(straggling.quarantine_seconds if straggling else None, settings.quarantine.seconds,
                              limits)
        if left <= 0:
            skipped.append(f"{loss.node} not quarantined: {quarantined + len(records)} nodes are already "
                           "(RAILYARD_QUARANTINE_MAX_SHARE / RAILYARD_QUARANTINE_MAX_NODES)")
            continue
        left -= 1
        if loss.reason == LossReason.STRAGGLER:
            recent += 1
        records.append(QuarantineRecord(node=loss.node, reason=loss.reason, until=utc(now + seconds)))
    return records, skipped


def plan_restart(given: RestartInput) -> RestartPlan:
    """How the released gang restarts (or waits for a replacement, or ends the attempt some other way)."""
    job, action, settings = given.job, given.action, given.settings
    placement = job.placement
    assert placement is not None
    ranks = sorted(placement.ranks, key=lambda r: r.rank)
    snapshot = given.snapshot
    # A node that became unusable since the decision (watch events land while the actor awaits) is lost too.
    late = sorted({r.node for r in ranks if not snapshot.has_node(r.node)} - {loss.node for loss in action.losses})
    losses = action.losses + tuple(
        NodeLoss(n, LossReason.NODE_NOT_USABLE,
                 f"node {n}: {given.excluded[n].reason if n in given.excluded else 'gone'}", None) for n in late)
    lost_names = {loss.node for loss in losses}
    keep = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks if r.node not in lost_names]
    lost = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks if r.node in lost_names]
    lost_models = {n: given.models[n] for n in lost_names if n in given.models}
    snapshot = snapshot.without_nodes(frozenset(lost_names))
    # Not onto nodes held for another gang (a preemptor's, or one being defragmented for); a kept rank may
    # share such a node, so they are avoided, not removed. Inter-pod rules as every solve sees them.
    limits = inter_pod_limits(snapshot, action.request, given.pod_infos())
    decision = solve_replacement(snapshot, action.request, keep, lost, lost_models, limits,
                                 avoid=held_for_others(given.holds, job.key))
    if action.reason == LossReason.MIGRATION and not decision.found:
        return RestartPlan(RestartKind.NO_ROOM, decision.reason or "no room outside the held nodes")
    wall = given.now
    now = utc(wall)
    known = {u.name: u for u in job.status.unhealthy_nodes}
    unhealthy = tuple(unhealthy_nodes(job, losses, known, wall))
    unreachable = {loss.node for loss in losses if not given.breaker_tripped
                   and force_delete(loss, settings.faults.force_delete_seconds)}
    on_lost = tuple(p.name for p in given.pods if (p.node_name or "") in unreachable)
    everyone = tuple(p.name for p in given.pods if not p.terminating)
    straggling = job.straggler_policy if action.reason == LossReason.STRAGGLER else None
    quarantine, skipped = plan_quarantine(job, losses, straggling, given.health, given.gpu_nodes, given.models,
                                          given.corroborating, given.straggler_quarantines, given.breaker_tripped,
                                          wall, settings)
    common = RestartPlan(RestartKind.RESTART, "", losses=losses, unhealthy=unhealthy, quarantine=tuple(quarantine),
                         skipped=tuple(skipped), new_losses=tuple(loss for loss in losses if loss.node not in known),
                         everyone=everyone, on_lost=on_lost, lost_names=tuple(sorted(lost_names)))
    if not decision.found:
        return _no_replacement(job, len(lost), decision.reason or "", common, given)
    new_home = {r.rank: r for r in decision.replacements}
    replicas = []
    for r in ranks:
        moved = new_home.get(r.rank)
        node, gpus = (moved.new, moved.gpus) if moved else (r.node, tuple(r.gpus))
        replicas.append((snapshot.node(node), gpus))
    replacements = tuple({"rank": r.rank, "lost": r.lost, "new": r.new, "same_tor": r.same_tor}
                         for r in decision.replacements)
    restart_count = job.restart_count + 1
    in_place = kept_pods(job, new_home, given.pods) if settings.reports.url else {}  # only reports say "restart"
    how = f"{len(in_place)} of {len(ranks)} ranks restart in their pods" if in_place else "every rank restarts"
    if losses:
        message = (f"restart {restart_count}: {len(lost)} ranks on {len(lost_names)} lost nodes replaced "
                   f"({sum(r.same_tor for r in decision.replacements)} in the same TOR); {how}")
    else:
        message = f"restart {restart_count} on the same nodes: {action.message}" + (f"; {how}" if in_place else "")
    record: dict[str, object] = {"lost_nodes": sorted(lost_names), "replacements": list(replacements),
                                 "moved_ranks": 0, "detected_at": detected(list(unhealthy), lost_names, now),
                                 "quarantine": list(quarantine)}
    evictions = None
    if action.reason == LossReason.STRAGGLER:  # counted across restarts: the hourly cap reads them
        kept = [t for t in job.status.straggler_evictions if wall - t.timestamp() < HOUR]
        evictions = tuple([*kept, now][-EVICTIONS_KEPT:])
    return replace(common, message=message, replicas=tuple(replicas), record=record, replacements=replacements,
                   straggler_evictions=evictions, kept=in_place,
                   everyone=tuple(p for p in common.everyone if p not in in_place.values()))


def kept_pods(job: Job, moved: Mapping[int, object], pods: Sequence[PodView]) -> dict[int, str]:
    """The pods an in-place restart (faultPolicy.restartStrategy: InPlace) keeps, by rank: every rank that stays on
    its node whose pod of this attempt runs there, not gated, not finished, not terminating. The others (lost, moved,
    exited, being deleted or evicted) are replaced by new pods. Nothing for a job restarted by re-creating its pods
    (and nothing when the pods have no report endpoint: the kept pods' supervisors hear of the restart there)."""
    placement = job.placement
    if placement is None or job.fault_policy.restart_strategy is not RestartStrategy.IN_PLACE:
        return {}
    by_name = {p.name: p for p in pods}
    kept: dict[int, str] = {}
    for r in placement.ranks:
        name = r.pod or pod_name(job.name, r.rank, placement.serial)
        pod = by_name.get(name)
        if r.rank in moved or pod is None or pod.gated or pod.finished or pod.terminating or pod.disruption or \
                pod.node_name != r.node or (pod.labels.get(LABEL_RESTART) != str(job.restart_count) and
                                            not is_carried(job.name, placement, r)):
            continue
        kept[r.rank] = name
    return kept


def _no_replacement(job: Job, lost: int, why: str, common: RestartPlan, given: RestartInput) -> RestartPlan:
    """No node fits a lost rank. Within replacementTimeoutSeconds the healthy ranks keep their nodes
    (Degraded) and the search is retried as capacity frees; then onNoReplacement applies."""
    policy = job.fault_policy
    message = f"no replacement for {lost} lost ranks: {why}"
    degraded = job.condition(ConditionType.DEGRADED)
    waiting_since = degraded.last_transition_time if degraded is not None and \
        degraded.status == ConditionStatus.TRUE and degraded.reason == RecoveryReason.NO_REPLACEMENT else None
    waited = given.now - waiting_since.timestamp() if waiting_since is not None else 0.0
    step = no_replacement_step(policy, waited)
    if step is NoReplacementStep.WAIT:
        retry = min(given.settings.placement.retry_seconds, policy.replacement_timeout_seconds - waited)
        write = waiting_since is None or list(common.unhealthy) != job.status.unhealthy_nodes
        return replace(common, kind=RestartKind.WAIT, message=message, retry=max(0.5, retry), waiting_write=write,
                       replacement_timeout=policy.replacement_timeout_seconds)
    if step is NoReplacementStep.SHRINK:
        shrunk = _shrink(job, message, common, given)
        if shrunk is not None:
            return shrunk
    if step is NoReplacementStep.FAIL:
        return replace(common, kind=RestartKind.FAIL, message=message)
    # Requeue, or a Shrink that found no valid size: the whole gang is placed again.
    message += f"; re-queued after {policy.replacement_timeout_seconds}s"
    return replace(common, kind=RestartKind.REQUEUE, message=message)


def _shrink(job: Job, message: str, common: RestartPlan, given: RestartInput) -> RestartPlan | None:
    """onNoReplacement: Shrink — continue on the survivors (at least minReplicas, a valid size); None when
    that is not possible (then it is requeued)."""
    spec, placement = job.spec, job.placement
    assert spec is not None and placement is not None
    ranks = sorted(placement.ranks, key=lambda r: r.rank)
    lost_names = list(common.lost_names)
    survivors = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks if r.node not in lost_names]
    size = largest_valid(len(survivors), spec.effective_min_replicas, spec.gpus_per_replica, spec.parallelism)
    if size is None or any(s.node not in given.models for s in survivors):
        return None
    kept = choose_shrink(survivors, given.models, len(survivors) - size)
    message = f"{message}; shrunk from {len(ranks)} to {size} replicas (onNoReplacement: Shrink)"
    now = utc(given.now)
    record: dict[str, object] = {"lost_nodes": lost_names,
                                 "moved_ranks": sum(1 for i, s in enumerate(kept) if s.rank != i),
                                 "detected_at": detected(list(common.unhealthy), lost_names, now),
                                 "quarantine": list(common.quarantine)}
    return replace(common, kind=RestartKind.SHRINK, message=message,
                   replicas=tuple((given.models[s.node], s.gpus) for s in kept), record=record)


def unhealthy_nodes(job: Job, losses: Sequence[NodeLoss], known: Mapping[str, UnhealthyNode],
                    wall: float) -> list[UnhealthyNode]:
    """The job's unhealthy nodes with these losses recorded (since: when the signal was first seen); a node
    already recorded for the same reason keeps its first sighting (so waiting for a replacement writes nothing
    new). Bounded: current losses, then the most recent others (UNHEALTHY_KEPT)."""
    lost = {loss.node for loss in losses}
    current = []
    for loss in losses:
        before = known.get(loss.node)
        since = parse_time(loss.since) or (before.since if before is not None and before.reason == loss.reason
                                           else None) or utc(wall - loss.observed_for)
        current.append(UnhealthyNode(name=loss.node, reason=loss.reason, message=loss.message[:1024], since=since))
    earlier = sorted((u for u in job.status.unhealthy_nodes if u.name not in lost),
                     key=lambda u: u.since.timestamp() if u.since is not None else 0.0, reverse=True)
    return (current + earlier)[:max(UNHEALTHY_KEPT, len(current))]


def detected(unhealthy: list[UnhealthyNode], lost: Iterable[str], now: datetime) -> datetime:
    names = set(lost)
    return min((u.since for u in unhealthy if u.name in names and u.since is not None), default=now)

