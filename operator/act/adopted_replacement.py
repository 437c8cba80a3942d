"""Places the pods an adopted gang's owner re-made (decide/adopted_gangs.PlaceReplaced): the new homes chosen by the
replacement rule next to the survivors, a lost node under them quarantined within the same limits as a
TrainingJob's (none while the breaker holds), recorded as a new attempt first (write-ahead: a successor pins and
releases them, see assess -> Resume), then those pods pinned and released; the survivors' pods are never touched,
and nothing is deleted or created — the pods are their owner's."""

from __future__ import annotations

import logging

from railyard.operator.act.actor_context import Context
from railyard.operator.act.attempts import Attempts
from railyard.operator.act.breaker import Breaker
from railyard.operator.act.events import Events
from railyard.operator.act.materialiser import Materialiser
from railyard.operator.act.quarantine import Quarantine
from railyard.operator.base import metrics
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import EventReason, RecoveryReason, RestartReason
from railyard.operator.cache.memory import holds
from railyard.operator.cache.state_views import node_models, pod_infos
from railyard.operator.decide.actions import PlaceReplaced
from railyard.operator.decide.adopted_gangs import plan_replaced, replaced_losses, replaced_ranks
from railyard.operator.decide.holds import held_for_others
from railyard.operator.decide.restart_plan import plan_quarantine
from railyard.topology.solver.decision import inter_pod_limits

log = logging.getLogger("railyard.adoption")


class ReplacedPods:
    def __init__(self, ctx: Context, events: Events, attempts: Attempts, materialiser: Materialiser,
                 quarantine: Quarantine, breaker: Breaker) -> None:
        self.ctx = ctx
        self.quarantine = quarantine
        self.breaker = breaker
        self.events = events
        self.attempts = attempts
        self.materialiser = materialiser

    async def place(self, job: Job, action: PlaceReplaced) -> None:
        state = self.ctx.state
        snapshot = state.snapshot()
        models = node_models(state)
        limits = inter_pod_limits(snapshot, action.request, pod_infos(state))
        decision = plan_replaced(job, action, snapshot, models, limits,
                                 held_for_others(holds(self.ctx.memories, state.jobs), job.key))
        names = ", ".join(action.pods[r][0] for r in action.ranks)
        if not decision.found:  # tried again every pass, as capacity frees
            message = f"pods {names} re-made by their owner: no node for them yet ({decision.reason})"
            await self.events.warning(job, RecoveryReason.NO_REPLACEMENT, message, key=f"waiting/{names}")
            return
        replicas = replaced_ranks(job, action, decision, snapshot)
        replacements = [{"rank": r.rank, "lost": r.lost, "new": r.new, "same_tor": r.same_tor}
                        for r in decision.replacements]
        restart_count = job.restart_count + 1
        losses = replaced_losses(job, action, state.health, self.ctx.clock.monotonic())
        wall = self.ctx.clock.time()
        quarantine, skipped = plan_quarantine(
            job, losses, None, state.health, len(state.last_model), models,
            lambda node: self.quarantine.corroborating(job, node), self.quarantine.straggler_quarantines(wall),
            self.breaker.tripped, wall, self.ctx.settings)
        message = (f"restart {restart_count}: pods {names} re-made by their owner placed "
                   f"({sum(r.same_tor for r in decision.replacements)} in the same TOR); the others keep running")
        record: dict[str, object] = {"lost_nodes": sorted(loss.node for loss in losses),
                                     "replacements": replacements, "quarantine": list(quarantine)}
        cause = losses[0].reason if losses else RestartReason.POD_DELETED
        metrics.RESTARTS.labels(cause).inc()
        fresh = await self.attempts.record(job, cause, message, replicas, record, adopted=list(action.pods))
        if fresh is None:
            return
        log.info("job %s/%s: %s", *job.key, message)
        for loss in losses:
            await self.events.warning(job, EventReason.NODE_LOST, loss.message, key=f"{restart_count}/{loss.node}")
        for why in skipped:
            await self.events.normal(job, EventReason.QUARANTINE_SKIPPED, why, key=f"{restart_count}/{why[:40]}")
        await self.events.normal(job, EventReason.REPLACEMENT_CHOSEN, "; ".join(
            f"rank {r['rank']}: {r['lost']} -> {r['new']}{' (same TOR)' if r['same_tor'] else ''}"
            for r in replacements), key=str(restart_count))
        self.quarantine.planned(quarantine)
        await self.quarantine.apply(quarantine)
        self.materialiser.enqueue(fresh)
