"""Restarts a released gang whose nodes are lost, whose pod was disrupted or deleted, or whose
training process failed: every healthy rank keeps its node, GPUs and rank; the lost ranks get
replacements next to where they were (topology/replace.py); the whole gang restarts as a new attempt
(NCCL communicators must be rebuilt); lost nodes are quarantined. Without a replacement the healthy
ranks wait `replacementTimeoutSeconds`, then onNoReplacement applies (decide/policy.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from datetime import datetime

from railyard.operator.act.attempts import Attempts
from railyard.operator.act.breaker import Breaker
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.context import Context
from railyard.operator.act.events import Events
from railyard.operator.act.moves import Moves
from railyard.operator.act.pods import PodDeleter
from railyard.operator.act.quarantine import Quarantine
from railyard.operator.act.victims import Victims
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import ConditionStatus, ConditionType, EventReason, FinishReason, RecoveryReason
from railyard.operator.cache.memory import holds
from railyard.operator.decide import status as transitions
from railyard.operator.decide.actions import Restart
from railyard.operator.decide.holds import held_for_others
from railyard.operator.decide.policy import (
    NoReplacementStep,
    failure_streak,
    force_delete,
    infra_backoff,
    no_replacement_step,
    restart_delay,
)
from railyard.operator.decide.quarantine_limits import HOUR
from railyard.topology.api import QuarantineRecord, UnhealthyNode
from railyard.topology.elastic import choose_shrink, largest_valid
from railyard.topology.faults import LossReason, NodeLoss
from railyard.topology.model import GpuNode
from railyard.topology.replace import RankSlot, solve_replacement
from railyard.topology.timestamps import parse_time

PLANNED = (LossReason.MAINTENANCE, LossReason.MIGRATION)  # save a step first; no back-off, no cap
EVICTIONS_KEPT = 16  # status.stragglerEvictions: enough for any hourly cap an admin sets sensibly

log = logging.getLogger("railyard.recovery")
UNHEALTHY_KEPT = 32  # status.unhealthyNodes: current losses and the most recent others (the CRD allows 64)


class Recovery:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, pods: PodDeleter, attempts: Attempts,
                 quarantine: Quarantine, breaker: Breaker, checkpoints: Checkpoints,
                 victims: Victims, moves: Moves) -> None:
        self.ctx = ctx
        self.victims = victims
        self.moves = moves
        # One restart's solve -> record at a time: restarts of one pass run concurrently, and two solved on
        # the same state (before either is recorded) could choose the same free GPUs.
        self.choosing = asyncio.Lock()
        self.checkpoints = checkpoints
        self.breaker = breaker
        self.writer = writer
        self.events = events
        self.pods = pods
        self.attempts = attempts
        self.quarantine = quarantine

    def models(self, names: Iterable[str]) -> dict[str, GpuNode] | None:
        """The node models (usable now, or last seen usable) of these nodes; None if one is unknown."""
        out: dict[str, GpuNode] = {}
        for name in names:
            model = self.ctx.state.nodes.get(name) or self.ctx.state.last_model.get(name)
            if model is None:
                return None
            out[name] = model
        return out

    async def restart(self, job: Job, action: Restart) -> None:
        """Debounced: losses close together make one restart; a process failure waits its backoff;
        infrastructure restarts of one job back off and are capped per hour; while the circuit breaker
        holds, NotReady losses wait."""
        if self.breaker.tripped and any(loss.reason == LossReason.NODE_NOT_READY for loss in action.losses):
            return  # a partition, not a fault: the breaker marks the job and lifts the hold when it clears
        if action.reason in PLANNED and not self.checkpoints.saved_first(job, self._grace(action)):
            asyncio.get_running_loop().call_later(1.0, self.writer.wake)  # planned: save a step first
            return
        memory = self.ctx.memories.recall(job)
        mono = self.ctx.clock.monotonic()
        if memory.losses_seen_at is None:
            memory.losses_seen_at = mono
        placement = self.ctx.settings.placement
        streak = failure_streak(memory.failure_streak, self._attempt_ran(job))
        delay = restart_delay(action, job.fault_policy, streak, placement.loss_debounce_seconds,
                              placement.not_ready_debounce_seconds)
        wait = delay - (mono - memory.losses_seen_at)
        # A planned move goes at the admin's pace: the storm brake is for faults.
        if not action.counted and action.reason not in PLANNED:
            recent = [t for t in memory.infra_restarts if mono - t < 3600]
            memory.infra_restarts = recent
            if len(recent) >= placement.infra_restarts_per_hour:
                await self._capped(job, len(recent), 3600 - (mono - recent[0]))
                return
            if recent:
                backoff = infra_backoff(len(recent), placement.infra_backoff_seconds,
                                        placement.infra_backoff_max_seconds)
                wait = max(wait, backoff - (mono - recent[-1]))
        if wait > 0:
            asyncio.get_running_loop().call_later(wait, self.writer.wake)
            return
        if action.reason != LossReason.MIGRATION and \
                await self.victims.reclaim_spares(job, [loss.node for loss in action.losses]):
            asyncio.get_running_loop().call_later(1.0, self.writer.wake)  # backfilled spares are being freed
            return
        memory.losses_seen_at = None
        restarted = await self.restart_now(job, action)
        memory.hold = None  # a replacement's hold served its purpose
        if restarted and action.counted:
            memory.failure_streak = streak + 1
        elif restarted and action.reason == LossReason.MAINTENANCE:
            metrics.MAINTENANCE_MOVES.inc()
        elif restarted and action.reason == LossReason.MIGRATION:
            metrics.MIGRATIONS.inc()
        elif restarted:
            memory.infra_restarts.append(mono)

    def _grace(self, action: Restart) -> float:
        """How long a planned move waits for the step its ranks were asked to save."""
        placement = self.ctx.settings.placement
        if action.reason == LossReason.MIGRATION:
            return placement.preemption_checkpoint_seconds
        return placement.maintenance_checkpoint_seconds

    def _attempt_ran(self, job: Job) -> float | None:
        """Seconds since the current attempt was released (None: not known)."""
        restart = job.status.last_restart
        began = restart.released_at if restart is not None and restart.released_at is not None else \
            job.status.start_time
        return self.ctx.clock.time() - began.timestamp() if began is not None else None

    async def _capped(self, job: Job, count: int, retry: float) -> None:
        """Too many infrastructure restarts this hour: the gang waits (Degraded=RestartCap) and an alert
        fires; none of it counts against maxRestarts."""
        message = (f"{count} infrastructure restarts in the last hour (RAILYARD_INFRA_RESTARTS_PER_HOUR); the next "
                   "waits until the oldest is an hour old")
        asyncio.get_running_loop().call_later(max(1.0, retry), self.writer.wake)
        patch = transitions.restart_capped(job, message, utc(self.ctx.clock.time()))
        if patch is not None and await self.writer.patch(job, patch) is not None:
            await self.events.warning(job, RecoveryReason.RESTART_CAP, message)

    async def restart_now(self, job: Job, action: Restart) -> bool:
        """True when the gang restarted (or was re-queued or failed); False while it waits."""
        async with self.choosing:
            return await self._restart_now(job, action)

    async def _restart_now(self, job: Job, action: Restart) -> bool:
        placement = job.placement
        assert placement is not None
        state = self.ctx.state
        ranks = sorted(placement.ranks, key=lambda r: r.rank)
        snapshot = state.snapshot()
        # A node that became unusable since the decision (watch events land while we await) is lost too.
        late = sorted({r.node for r in ranks if not snapshot.has_node(r.node)} - {loss.node for loss in action.losses})
        excluded = state.excluded
        losses = action.losses + tuple(
            NodeLoss(n, LossReason.NODE_NOT_USABLE, f"node {n}: {excluded[n].reason if n in excluded else 'gone'}",
                     None) for n in late)
        lost_names = {loss.node for loss in losses}
        keep = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks if r.node not in lost_names]
        lost = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks if r.node in lost_names]
        models = {n: state.last_model[n] for n in lost_names if n in state.last_model}
        snapshot = snapshot.without_nodes(frozenset(lost_names))
        started = time.perf_counter()
        # Not onto nodes held for another gang (a preemptor's, or one being defragmented for); a kept rank
        # may share such a node, so they are avoided, not removed.
        decision = solve_replacement(snapshot, action.request, keep, lost, models,
                                     avoid=held_for_others(holds(self.ctx.memories, state.jobs), job.key))
        if action.reason == LossReason.MIGRATION and not decision.found:
            await self.moves.no_room(job, decision.reason or "no room outside the held nodes")
            return False
        metrics.REPLACEMENT_SECONDS.observe(time.perf_counter() - started)
        wall = self.ctx.clock.time()
        now = utc(wall)
        restart_count = job.restart_count + 1
        known = {u.name: u for u in job.status.unhealthy_nodes}
        unhealthy = _unhealthy(job, losses, known, wall)
        unreachable = {loss.node for loss in losses if not self.breaker.tripped
                       and force_delete(loss, self.ctx.settings.placement.force_delete_seconds)}
        on_lost = tuple(p.name for p in state.job_pods(job.key) if (p.node_name or "") in unreachable)
        everyone = tuple(p.name for p in state.job_pods(job.key) if not p.terminating)
        for loss in losses:
            if loss.node not in known:
                await self.events.warning(job, EventReason.NODE_LOST, loss.message, key=f"{restart_count}/{loss.node}")
        straggling = job.straggler_policy if action.reason == LossReason.STRAGGLER else None
        quarantine, skipped = self.quarantine.plan(job, losses, straggling)
        for why in skipped:
            await self.events.normal(job, EventReason.QUARANTINE_SKIPPED, why, key=f"{restart_count}/{why[:40]}")
        if not decision.found:
            ended = await self._no_replacement(job, action, losses, len(lost), decision.reason or "", unhealthy,
                                               everyone, on_lost, quarantine)
            await self.quarantine.apply(quarantine)
            return ended
        metrics.RESTARTS.labels(action.reason).inc()
        new_home = {r.rank: r for r in decision.replacements}
        replicas = []
        for r in ranks:
            moved = new_home.get(r.rank)
            node, gpus = (moved.new, moved.gpus) if moved else (r.node, tuple(r.gpus))
            replicas.append((snapshot.node(node), gpus))
        replacements = [{"rank": r.rank, "lost": r.lost, "new": r.new, "same_tor": r.same_tor}
                        for r in decision.replacements]
        if losses:
            message = (f"restart {restart_count}: {len(lost)} ranks on {len(lost_names)} lost nodes replaced "
                       f"({sum(r.same_tor for r in decision.replacements)} in the same TOR); every rank restarts")
        else:
            message = f"restart {restart_count} on the same nodes: {action.message}"
        record: dict[str, object] = {"lost_nodes": sorted(lost_names), "replacements": replacements, "moved_ranks": 0,
                                     "detected_at": _detected(unhealthy, lost_names, now), "quarantine": quarantine}
        evictions = None
        if action.reason == LossReason.STRAGGLER:  # counted across restarts: the hourly cap reads them
            kept = [t for t in job.status.straggler_evictions if wall - t.timestamp() < HOUR]
            evictions = [*kept, now][-EVICTIONS_KEPT:]
        if await self.attempts.record(job, action.reason, message, replicas, record, unhealthy,
                                      counted=action.counted, straggler_evictions=evictions) is None:
            return False
        if replacements:
            await self.events.normal(job, EventReason.REPLACEMENT_CHOSEN, "; ".join(
                f"rank {r['rank']}: {r['lost']} -> {r['new']}{' (same TOR)' if r['same_tor'] else ''}"
                for r in replacements), key=str(restart_count))
        await self.events.normal(job, EventReason.RESTART_ISSUED, message, key=str(restart_count))
        await self.quarantine.apply(quarantine)
        await self.attempts.replace_pods(job, everyone, on_lost)
        return True

    async def _no_replacement(self, job: Job, action: Restart, losses: Sequence[NodeLoss], lost: int, why: str,
                              unhealthy: list[UnhealthyNode], everyone: tuple[str, ...], on_lost: tuple[str, ...],
                              quarantine: list[QuarantineRecord]) -> bool:
        """No node fits a lost rank. Within replacementTimeoutSeconds the healthy ranks keep their
        nodes (Degraded) and the search is retried as capacity frees; then onNoReplacement applies.
        True once it applied (the gang shrank, was re-queued or failed)."""
        policy = job.fault_policy
        lost_names = sorted({loss.node for loss in losses})
        message = f"no replacement for {lost} lost ranks: {why}"
        degraded = job.condition(ConditionType.DEGRADED)
        waiting_since = degraded.last_transition_time if degraded is not None and \
            degraded.status == ConditionStatus.TRUE and degraded.reason == RecoveryReason.NO_REPLACEMENT else None
        clock = self.ctx.clock.time()
        waited = clock - waiting_since.timestamp() if waiting_since is not None else 0.0
        now = utc(clock)
        step = no_replacement_step(policy, waited)
        if step is NoReplacementStep.WAIT:
            if waiting_since is None or unhealthy != job.status.unhealthy_nodes:
                patch = transitions.waiting_for_replacement(job, unhealthy, message,
                                                            policy.replacement_timeout_seconds, now)
                if await self.writer.patch(job, patch) is None:
                    return False
                await self.events.warning(job, RecoveryReason.NO_REPLACEMENT, message, key="waiting")
            retry = min(self.ctx.settings.placement.retry_seconds, policy.replacement_timeout_seconds - waited)
            asyncio.get_running_loop().call_later(max(0.5, retry), self.writer.wake)
            return False
        metrics.RESTARTS.labels(action.reason).inc()
        restart_count = job.restart_count + 1
        if step is NoReplacementStep.SHRINK and await self._shrink(job, action, lost_names, unhealthy, message,
                                                                   quarantine):
            await self.quarantine.apply(quarantine)
            await self.attempts.replace_pods(job, everyone, on_lost)
            return True
        if step is NoReplacementStep.FAIL:
            patch = transitions.finished(job, False, FinishReason.NO_REPLACEMENT, message, now, unhealthy,
                                         stop_running=False)
        else:  # Requeue, or a Shrink that found no valid size: the whole gang is placed again
            message += f"; re-queued after {policy.replacement_timeout_seconds}s"
            patch = transitions.requeued(job, action.reason, lost_names, unhealthy, message,
                                         self.attempts.checkpoints.committed(job), now)
        if await self.writer.patch(job, patch) is None:
            return False
        await self.events.warning(job, RecoveryReason.NO_REPLACEMENT, message, key=f"final/{restart_count}")
        await self.pods.delete(job.key, everyone, on_lost)
        return True

    async def _shrink(self, job: Job, action: Restart, lost_names: list[str], unhealthy: list[UnhealthyNode],
                      message: str, quarantine: list[QuarantineRecord]) -> bool:
        """onNoReplacement: Shrink — continue on the survivors (at least minReplicas, a valid size);
        False when that is not possible (the caller requeues)."""
        spec = job.spec
        placement = job.placement
        assert spec is not None and placement is not None
        ranks = sorted(placement.ranks, key=lambda r: r.rank)
        survivors = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks if r.node not in lost_names]
        size = largest_valid(len(survivors), spec.effective_min_replicas, spec.gpus_per_replica, spec.parallelism)
        models = self.models(s.node for s in survivors)
        if size is None or models is None:
            return False
        kept = choose_shrink(survivors, models, len(survivors) - size)
        replicas = [(models[s.node], s.gpus) for s in kept]
        message = f"{message}; shrunk from {len(ranks)} to {size} replicas (onNoReplacement: Shrink)"
        now = utc(self.ctx.clock.time())
        record: dict[str, object] = {"lost_nodes": lost_names,
                                     "moved_ranks": sum(1 for i, s in enumerate(kept) if s.rank != i),
                                     "detected_at": _detected(unhealthy, set(lost_names), now),
                                     "quarantine": quarantine}
        conditions = transitions.shrunk_conditions(job, message, now)
        if await self.attempts.record(job, action.reason, message, replicas, record, unhealthy,
                                      conditions=conditions) is None:
            return False
        await self.events.warning(job, EventReason.SHRUNK, message)
        return True


def _unhealthy(job: Job, losses: Sequence[NodeLoss], known: dict[str, UnhealthyNode],
               wall: float) -> list[UnhealthyNode]:
    """The job's unhealthy nodes with these losses recorded (since: when the signal was first seen); a
    node already recorded for the same reason keeps its first sighting (so waiting for a replacement
    writes nothing new). Bounded: current losses, then the most recent others (UNHEALTHY_KEPT)."""
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


def _detected(unhealthy: list[UnhealthyNode], lost: set[str], now: datetime) -> datetime:
    return min((u.since for u in unhealthy if u.name in lost and u.since is not None), default=now)
