"""Resizes a running elastic gang whose size differs from spec.replicas. A shrink drops replicas from
the least dense domain; a grow is a delta solve next to the job (current ranks keep their nodes);
either way the gang restarts as a new attempt, from a checkpoint taken for it when ranks report.
Growing back by itself (after a shrink) waits its cooldown and grows by at least minGrowth
(decide/policy.grow_rule)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from railyard.operator.act.attempts import Attempts
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.context import Context
from railyard.operator.act.events import Events
from railyard.operator.act.recovery import Recovery
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import ConditionType, EventReason, RestartReason
from railyard.operator.cache.memory import GrowAttempt, holds
from railyard.operator.decide import status as transitions
from railyard.operator.decide.actions import Resize
from railyard.operator.decide.holds import held_for_others
from railyard.operator.decide.policy import grow_rule
from railyard.topology.api import TrainingJobSpec
from railyard.topology.elastic import choose_shrink, largest_valid, solve_growth, valid_size
from railyard.topology.replace import RankSlot, Replacement
from railyard.topology.request import GangRequest


class Resizer:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, checkpoints: Checkpoints,
                 attempts: Attempts, recovery: Recovery) -> None:
        self.ctx = ctx
        self.writer = writer
        self.events = events
        self.checkpoints = checkpoints
        self.attempts = attempts
        self.recovery = recovery

    async def resize(self, job: Job, action: Resize) -> None:
        async with self.recovery.choosing:  # never solved on the same state as a restart of this pass
            await self._resize(job, action)

    async def _resize(self, job: Job, action: Resize) -> None:
        spec, placement = job.spec, job.placement
        assert spec is not None and placement is not None
        policy = spec.elastic_policy
        ranks = sorted(placement.ranks, key=lambda r: r.rank)
        current, desired = len(ranks), spec.replicas
        slots = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks]
        models = self.recovery.models(s.node for s in slots)
        if models is None:
            return  # a node of the gang is unknown: the fault path comes first
        user = (placement.desired_replicas or current) != desired  # kubectl scale / an edit
        now = self.ctx.clock.time()
        memory = self.ctx.memories.recall(job)
        started = time.perf_counter()
        if desired < current:
            size = largest_valid(desired, 1, spec.gpus_per_replica, spec.parallelism) or desired
            kept = choose_shrink(slots, models, current - size)
            replicas = [(models[s.node], s.gpus) for s in kept]
            moved = sum(1 for i, s in enumerate(kept) if s.rank != i)
        else:
            rule = grow_rule(user, now - self._attempt_began(job, now), policy)
            if not rule.allowed:
                return
            attempt = memory.grow
            if attempt is not None and attempt.freed == self.ctx.state.usage.freed and \
                    self.ctx.clock.monotonic() - attempt.at < self.ctx.settings.placement.retry_seconds:
                return  # nothing was freed since the last attempt found no room (nodes back: the retry period)
            grown = self._grow(action.request, spec, slots, desired, rule.min_growth)
            if grown is None:
                memory.grow = GrowAttempt(self.ctx.state.usage.freed, self.ctx.clock.monotonic())
                patch = transitions.no_room_to_grow(job, f"{current} of {desired} replicas: no room to grow next to "
                                                    "the job", utc(now))
                if patch is not None:
                    await self.writer.patch(job, patch)
                return
            memory.grow = None
            snapshot = self.ctx.state.snapshot()
            replicas = [(models[s.node], s.gpus) for s in slots] + [(snapshot.node(r.new), r.gpus) for r in grown]
            moved = 0
        metrics.RESIZE_SECONDS.observe(time.perf_counter() - started)
        if len(replicas) == current or not self._checkpoint_first(job, policy.checkpoint_before_resize,
                                                                  policy.checkpoint_timeout_seconds):
            return
        restart_count = job.restart_count + 1
        reason = RestartReason.SCALE_UP if len(replicas) > current else RestartReason.SCALE_DOWN
        message = f"restart {restart_count}: resized from {current} to {len(replicas)} replicas ({reason})"
        if await self.attempts.record(job, reason, message, replicas, {"moved_ranks": moved}) is None:
            return
        metrics.RESTARTS.labels(reason).inc()
        await self.events.normal(job, EventReason.RESIZED, message, key=str(restart_count))
        old = tuple(p.name for p in self.ctx.state.job_pods(job.key) if not p.terminating)
        await self.attempts.replace_pods(job, old)

    def _grow(self, request: GangRequest, spec: TrainingJobSpec, slots: Sequence[RankSlot], desired: int,
              min_growth: int) -> list[Replacement] | None:
        """The largest valid growth towards `desired` that fits next to the job (never onto nodes held for
        another gang: a preemptor's, or one being defragmented for), or None."""
        snapshot = self.ctx.state.snapshot()
        held = held_for_others(holds(self.ctx.memories, self.ctx.state.jobs), (request.namespace, request.name))
        for size in range(desired, len(slots), -1):
            if size - len(slots) < min_growth:
                break
            if not valid_size(size, spec.gpus_per_replica, spec.parallelism):
                continue
            decision = solve_growth(snapshot, request, list(slots), size - len(slots), avoid=held)
            if decision.found:
                return list(decision.replacements)
        return None

    @staticmethod
    def _attempt_began(job: Job, now: float) -> float:
        """When the gang's current attempt was decided (its placement, or its last restart)."""
        restart = job.status.last_restart
        if restart is not None and restart.decided_at is not None:
            return restart.decided_at.timestamp()
        placed = job.condition(ConditionType.PLACED)
        if placed is not None and placed.last_transition_time is not None:
            return placed.last_transition_time.timestamp()
        return now

    def _checkpoint_first(self, job: Job, wanted: bool, timeout: float) -> bool:
        """True when the resize may go ahead: no checkpoint wanted, nobody reports, or the checkpoint
        every rank was asked for is in (or timed out)."""
        if not wanted or self.checkpoints.saved_first(job, timeout):
            return True
        asyncio.get_running_loop().call_later(1.0, self.writer.wake)
        return False
