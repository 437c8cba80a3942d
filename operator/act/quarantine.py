"""Keeps every job off a node that failed under a gang: the `railyard.dev/unhealthy=<reason>:NoSchedule`
taint (the solver excludes such a node whatever a job tolerates) with the time it ends in the node's
`railyard.dev/quarantined-until` annotation (RAILYARD_QUARANTINE_SECONDS, an hour by default; a
straggler's stragglerPolicy.quarantineSeconds, never past RAILYARD_QUARANTINE_MAX_SECONDS) and when it
began in `railyard.dev/quarantined-at`. The operator lifts both when the time has passed — a
GPU-fault quarantine only once no GPU fault condition is True any more; an admin may lift it earlier
(`kubectl taint node NODE railyard.dev/unhealthy-`). The operator's limits (decide/quarantine_limits)
bound how many nodes it quarantines; a quarantine it skips is logged and an Event on the job says
why (the job still moves off the node). Quarantines are part of a restart's write-ahead record
(lastRestart.quarantine), so a successor applies what its predecessor decided."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from railyard.operator.act.breaker import Breaker
from railyard.operator.act.context import Context
from railyard.operator.base.clock import utc
from railyard.operator.base.keys import ANNOTATION_QUARANTINED_AT, ANNOTATION_QUARANTINED_UNTIL, QUARANTINE_TAINT
from railyard.operator.base.objects import Job
from railyard.operator.decide.policy import quarantines
from railyard.operator.decide.quarantine_limits import (
    Limits,
    in_last_hour,
    lasting,
    room,
    straggler_quarantine_allowed,
)
from railyard.topology.api import QuarantineRecord, StragglerPolicy, rfc3339
from railyard.topology.faults import LossReason, NodeLoss
from railyard.topology.timestamps import epoch

log = logging.getLogger("railyard.quarantine")


class Quarantine:
    def __init__(self, ctx: Context, breaker: Breaker) -> None:
        self.ctx = ctx
        self.breaker = breaker
        self._straggler_at: dict[str, float] = {}  # node -> when this operator planned its straggler quarantine

    def plan(self, job: Job, losses: Sequence[NodeLoss], straggling: StragglerPolicy | None = None
             ) -> tuple[list[QuarantineRecord], list[str]]:
        """The quarantines these losses call for and the limits allow, to record; and why each other
        loss that calls for one gets none."""
        settings = self.ctx.settings.placement
        if not settings.quarantine or self.breaker.tripped:
            return [], []
        state, limits = self.ctx.state, Limits.of(settings)
        now = self.ctx.clock.time()
        quarantined = sum(1 for h in state.health.values() if h.quarantined)
        left = room(quarantined, len(state.last_model), limits)
        records: list[QuarantineRecord] = []
        skipped: list[str] = []
        for loss in losses:
            if not quarantines(loss.reason) or loss.node not in state.health:
                continue
            seconds = lasting(None, settings.quarantine_seconds, limits)
            if loss.reason == LossReason.STRAGGLER:
                why = straggler_quarantine_allowed(self._holds_whole(job, loss.node),
                                                   self._corroborating(job, loss.node),
                                                   len(self._straggler_quarantines(now)), limits)
                if why is not None:
                    skipped.append(f"{loss.node} not quarantined: {why}")
                    continue
                seconds = lasting(straggling.quarantine_seconds if straggling else None, settings.quarantine_seconds,
                                  limits)
            if left <= 0:
                skipped.append(f"{loss.node} not quarantined: {quarantined + len(records)} nodes are already "
                               "(RAILYARD_QUARANTINE_MAX_SHARE / RAILYARD_QUARANTINE_MAX_NODES)")
                continue
            left -= 1
            if loss.reason == LossReason.STRAGGLER:
                self._straggler_at[loss.node] = now
            records.append(QuarantineRecord(node=loss.node, reason=loss.reason, until=utc(now + seconds)))
        for why in skipped:
            log.info("job %s/%s: %s", job.namespace, job.name, why)
        return records, skipped

    def _holds_whole(self, job: Job, node: str) -> bool:
        model = self.ctx.state.nodes.get(node) or self.ctx.state.last_model.get(node)
        placement = job.placement
        held = sum(len(r.gpus) for r in placement.ranks if r.node == node) if placement is not None else 0
        return model is not None and held >= model.gpu_count

    def _corroborating(self, job: Job, node: str) -> int:
        """Other jobs that find the node slow too (their own reports, their own status)."""
        return sum(1 for other in self.ctx.state.jobs.values()
                   if other.uid != job.uid and any(s.node == node for s in other.status.stragglers or []))

    def _straggler_quarantines(self, now: float) -> list[float]:
        """When each node's straggler quarantine in the last hour began: the nodes' own annotations (an
        operator restart forgets nothing) and what this operator planned but may not see yet."""
        began = dict(self._straggler_at)
        for name, health in self.ctx.state.health.items():
            if health.quarantine_reason == LossReason.STRAGGLER and health.quarantined_at:
                try:
                    began.setdefault(name, epoch(health.quarantined_at, 0.0))
                except ValueError:  # an edited annotation: counts as just begun
                    began.setdefault(name, now)
        self._straggler_at = {n: t for n, t in self._straggler_at.items() if now - t < 3600}
        return in_last_hour(began.values(), now)

    async def apply(self, records: Sequence[QuarantineRecord]) -> None:
        for record in records:
            if record.node in self.ctx.state.health and record.until is not None:
                await self.ctx.api.taint_node(record.node, {"key": QUARANTINE_TAINT, "value": record.reason,
                                                            "effect": "NoSchedule"},
                                              {ANNOTATION_QUARANTINED_UNTIL: rfc3339(record.until),
                                               ANNOTATION_QUARANTINED_AT: rfc3339(utc(self.ctx.clock.time()))})

    async def lift_expired(self, now: float) -> None:
        for name, health in list(self.ctx.state.health.items()):
            until = health.quarantined_until
            if not until or epoch(until, now) > now or not health.quarantined:
                continue
            if health.faults:
                continue  # a GPU fault quarantine stays while the fault condition is True
            log.info("node %s: quarantine ended (%s); lifting the %s taint", name, until, QUARANTINE_TAINT)
            await self.ctx.api.lift_quarantine(name, QUARANTINE_TAINT,
                                               (ANNOTATION_QUARANTINED_UNTIL, ANNOTATION_QUARANTINED_AT))
