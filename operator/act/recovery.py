"""Restarts a released gang whose nodes are lost, whose pod was disrupted or deleted, whose training process
failed, whose straggler is evicted, or which moves for a drain or a waiting gang: decide/restart_plan.py says
when (the gate), with whose spares, and how; this carries it out — asks the ranks to save a step before a
planned move, marks reclaimed spares' victims, writes the new attempt ahead (act/attempts.py), says so in
Events, taints the quarantined nodes and deletes the old attempt's pods. One restart is solved and recorded
at a time: two solved on the same state (before either is recorded) could choose the same free GPUs."""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial

from railyard.operator.act.actor_context import Context
from railyard.operator.act.attempts import Attempts
from railyard.operator.act.breaker import Breaker
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.events import Events
from railyard.operator.act.moves import Moves
from railyard.operator.act.pods import PodDeleter
from railyard.operator.act.preemptions import Victims
from railyard.operator.act.quarantine import Quarantine
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import EventReason, FinishReason, RecoveryReason
from railyard.operator.cache.memory import JobMemory, holds
from railyard.operator.cache.state_views import node_models, pod_infos
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.actions import Restart
from railyard.operator.decide.fault_save import FaultSave, FaultSaveOutcome, plan_fault_save
from railyard.operator.decide.fault_save import record as fault_save_record
from railyard.operator.decide.restart_plan import (
    GateKind,
    RestartInput,
    RestartKind,
    RestartMemory,
    RestartPlan,
    SpareKind,
    after_restart,
    partitioned,
    plan_restart,
    plan_spares,
    restart_gate,
    saves_first,
)
from railyard.topology.api.status import SaveOnFaultRecord
from railyard.topology.cluster.faults import LossReason

log = logging.getLogger("railyard.recovery")


class Recovery:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, pods: PodDeleter, attempts: Attempts,
                 quarantine: Quarantine, breaker: Breaker, checkpoints: Checkpoints,
                 victims: Victims, moves: Moves) -> None:
        self.ctx = ctx
        self.victims = victims
        self.moves = moves
        self.choosing = asyncio.Lock()
        self.checkpoints = checkpoints
        self.breaker = breaker
        self.writer = writer
        self.events = events
        self.pods = pods
        self.attempts = attempts
        self.quarantine = quarantine

    async def restart(self, job: Job, action: Restart) -> None:
        """Carry a restart through its gate: a planned move saves a step first; losses close together make
        one restart; a process failure waits its back-off; infrastructure restarts back off and stop at an
        hourly cap; while the circuit breaker holds, NotReady losses wait; reclaimed spares are waited for."""
        settings = self.ctx.settings
        if partitioned(action, self.breaker.tripped):
            return  # a partition, not a fault: the breaker marks the job and lifts the hold when it clears
        grace = saves_first(action, settings)
        if grace is not None and not self.checkpoints.saved_first(job, grace):
            self._again(1.0)  # planned: save a step first
            return
        fault = plan_fault_save(job, action, self.ctx.state.job_pods(job.key))
        if fault is not None and fault.outcome is None and self.checkpoints.saved_on_fault(
                job, fault, settings.faults.save_on_fault_seconds) is FaultSaveOutcome.WAITING:
            self._again(1.0)  # a fault: the survivors save the last step they completed first
            return
        memory = self.ctx.memories.recall(job)
        mono = self.ctx.clock.monotonic()
        gate = restart_gate(job, action, _restart_memory(memory), self._attempt_ran(job), mono, settings)
        _remember(memory, gate.memory)
        if gate.kind is GateKind.CAPPED:
            await self._capped(job, gate.message, gate.wait)
            return
        if gate.kind is GateKind.DEBOUNCE:
            self._again(gate.wait)
            return
        if await self._spares(job, action):
            self._again(1.0)  # backfilled spares are being freed
            return
        restarted = await self.carry_out(job, action)
        memory.hold = None  # a replacement's hold served its purpose
        _remember(memory, after_restart(_restart_memory(memory), action, gate, restarted, mono))
        if restarted and action.reason == LossReason.MAINTENANCE:
            metrics.MAINTENANCE_MOVES.inc()
        elif restarted and action.reason == LossReason.MIGRATION:
            metrics.MIGRATIONS.inc()

    def _again(self, seconds: float) -> None:
        asyncio.get_running_loop().call_later(seconds, self.writer.wake)

    def _attempt_ran(self, job: Job) -> float | None:
        """Seconds since the current attempt was released (None: not known)."""
        restart = job.status.last_restart
        began = restart.released_at if restart is not None and restart.released_at is not None else \
            job.status.start_time
        return self.ctx.clock.time() - began.timestamp() if began is not None else None

    async def _capped(self, job: Job, message: str, retry: float) -> None:
        """Too many infrastructure restarts this hour: the gang waits (Degraded=RestartCap) and an alert
        fires; none of it counts against maxRestarts."""
        self._again(retry)
        patch = transitions.restart_capped(job, message, utc(self.ctx.clock.time()))
        if patch is not None and await self.writer.patch(job, patch) is not None:
            await self.events.warning(job, RecoveryReason.RESTART_CAP, message)

    async def _spares(self, job: Job, action: Restart) -> bool:
        """True while the gang waits for hot spares lent to backfilling jobs (reclaimed now, or before)."""
        state, settings = self.ctx.state, self.ctx.settings
        memory = self.ctx.memories.recall(job)
        spares = plan_spares(job, action, state.jobs, state.priority_classes,
                             state.snapshot(), node_models(state), state.job_pods, self.checkpoints.last_saved,
                             memory.hold, self.ctx.clock.monotonic(), self.ctx.clock.time(), settings)
        if spares.kind is SpareKind.RECLAIM:
            assert spares.hold is not None
            await self.victims.reclaim(job, spares.victims, spares.hold, spares.message)
            return True
        return spares.kind is SpareKind.WAIT

    async def carry_out(self, job: Job, action: Restart) -> bool:
        """Past its gate: the restart decided and carried out, one at a time. True when the gang restarted
        (or was re-queued or failed); False while it waits."""
        async with self.choosing:
            return await self._carry_out(job, action)

    async def _carry_out(self, job: Job, action: Restart) -> bool:
        state = self.ctx.state
        started = time.perf_counter()
        plan = plan_restart(RestartInput(
            job, action, state.snapshot(), node_models(state), state.excluded, state.health, len(state.last_model),
            state.job_pods(job.key), holds(self.ctx.memories, state.jobs), self.breaker.tripped,
            lambda node: self.quarantine.corroborating(job, node),
            self.quarantine.straggler_quarantines(self.ctx.clock.time()), partial(pod_infos, state),
            self.ctx.clock.time(), self.ctx.settings))
        if plan.kind is RestartKind.NO_ROOM:
            await self.moves.no_room(job, plan.message)
            return False
        metrics.REPLACEMENT_SECONDS.observe(time.perf_counter() - started)
        restart_count = job.restart_count + 1
        for loss in plan.new_losses:
            await self.events.warning(job, EventReason.NODE_LOST, loss.message, key=f"{restart_count}/{loss.node}")
        self.quarantine.planned(plan.quarantine)
        for why in plan.skipped:
            log.info("job %s/%s: %s", job.namespace, job.name, why)
            await self.events.normal(job, EventReason.QUARANTINE_SKIPPED, why, key=f"{restart_count}/{why[:40]}")
        if plan.kind is RestartKind.WAIT:
            await self._wait_for_replacement(job, plan)
            return False
        if plan.kind is RestartKind.RESTART:
            return await self._restart(job, action, plan, restart_count)
        return await self._no_replacement(job, action, plan, restart_count)

    def _fault_save_record(self, job: Job, action: Restart) -> dict[str, object]:
        """lastRestart.saveOnFault for a restart of a job that declares it (nothing for others)."""
        fault = plan_fault_save(job, action, self.ctx.state.job_pods(job.key))
        if fault is None:
            return {}
        request = self.ctx.memories.recall(job).fault_save
        if fault.outcome is not None:
            outcome = fault.outcome
        elif request is None or request.restart_count != job.restart_count:
            outcome = FaultSaveOutcome.NOT_REPORTING
        else:
            outcome = FaultSaveOutcome.SAVED if request.saved is not None else FaultSaveOutcome.NO_ANSWER
            fault = FaultSave(request.savers, None, fault.message)
        step = request.saved[0] if request is not None and request.saved is not None and \
            outcome is FaultSaveOutcome.SAVED else None
        return {"save_on_fault": fault_save_record(fault, outcome, step)}

    async def _restart(self, job: Job, action: Restart, plan: RestartPlan, restart_count: int) -> bool:
        metrics.RESTARTS.labels(action.reason).inc()
        record = {**plan.record, **self._fault_save_record(job, action)}
        if await self.attempts.record(job, action.reason, plan.message, plan.replicas, record,
                                      list(plan.unhealthy), counted=action.counted,
                                      straggler_evictions=list(plan.straggler_evictions)
                                      if plan.straggler_evictions is not None else None, kept=plan.kept) is None:
            return False
        if plan.replacements:
            await self.events.normal(job, EventReason.REPLACEMENT_CHOSEN, "; ".join(
                f"rank {r['rank']}: {r['lost']} -> {r['new']}{' (same TOR)' if r['same_tor'] else ''}"
                for r in plan.replacements), key=str(restart_count))
        await self.events.normal(job, EventReason.RESTART_ISSUED, plan.message, key=str(restart_count))
        saved = record.get("save_on_fault")
        if isinstance(saved, SaveOnFaultRecord):
            say = self.events.normal if saved.outcome == FaultSaveOutcome.SAVED else self.events.warning
            await say(job, EventReason.SAVE_ON_FAULT, saved.message, key=str(restart_count))
        await self.quarantine.apply(plan.quarantine)
        await self.attempts.replace_pods(job, plan.everyone, plan.on_lost, plan.kept)
        return True

    async def _wait_for_replacement(self, job: Job, plan: RestartPlan) -> None:
        """No node fits a lost rank yet: the healthy ranks keep their nodes (Degraded) and the search is
        retried as capacity frees."""
        if plan.waiting_write:
            patch = transitions.waiting_for_replacement(job, list(plan.unhealthy), plan.message,
                                                        plan.replacement_timeout, utc(self.ctx.clock.time()))
            if await self.writer.patch(job, patch) is not None:
                await self.events.warning(job, RecoveryReason.NO_REPLACEMENT, plan.message, key="waiting")
                self._again(plan.retry)
        else:
            self._again(plan.retry)
        await self.quarantine.apply(plan.quarantine)

    async def _no_replacement(self, job: Job, action: Restart, plan: RestartPlan, restart_count: int) -> bool:
        """onNoReplacement applied: the gang shrank, was re-queued or failed."""
        metrics.RESTARTS.labels(action.reason).inc()
        now = utc(self.ctx.clock.time())
        if plan.kind is RestartKind.SHRINK:
            conditions = transitions.shrunk_conditions(job, plan.message, now)
            if await self.attempts.record(job, action.reason, plan.message, plan.replicas, dict(plan.record),
                                          list(plan.unhealthy), conditions=conditions) is None:
                return False
            await self.events.warning(job, EventReason.SHRUNK, plan.message)
            await self.quarantine.apply(plan.quarantine)
            await self.attempts.replace_pods(job, plan.everyone, plan.on_lost)
            return True
        if plan.kind is RestartKind.FAIL:
            patch = transitions.finished(job, False, FinishReason.NO_REPLACEMENT, plan.message, now,
                                         list(plan.unhealthy), stop_running=False)
        else:
            patch = transitions.requeued(job, action.reason, list(plan.lost_names), list(plan.unhealthy),
                                         plan.message, self.checkpoints.committed(job), now)
        if await self.writer.patch(job, patch) is None:
            return False
        await self.events.warning(job, RecoveryReason.NO_REPLACEMENT, plan.message, key=f"final/{restart_count}")
        await self.quarantine.apply(plan.quarantine)
        await self.pods.delete(job.key, plan.everyone, plan.on_lost)
        return True


def _restart_memory(memory: JobMemory) -> RestartMemory:
    return RestartMemory(memory.losses_seen_at, tuple(memory.infra_restarts), memory.failure_streak)


def _remember(memory: JobMemory, value: RestartMemory) -> None:
    memory.losses_seen_at = value.losses_seen_at
    memory.infra_restarts = list(value.infra_restarts)
    memory.failure_streak = value.failure_streak
