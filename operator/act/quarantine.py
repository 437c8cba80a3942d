"""Keeps every job off a node that failed under a gang: the `railyard.dev/unhealthy=<reason>:NoSchedule`
taint (the solver excludes such a node whatever a job tolerates) with the time it ends in the node's
`railyard.dev/quarantined-until` annotation (RAILYARD_QUARANTINE_SECONDS, an hour by default; a
straggler's stragglerPolicy.quarantineSeconds). The operator lifts both when the time has passed — a
GPU-fault quarantine only once no GPU fault condition is True any more; an admin may lift it earlier
(`kubectl taint node NODE railyard.dev/unhealthy-`). Quarantines are part of a restart's write-ahead
record (lastRestart.quarantine), so a successor applies what its predecessor decided."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from railyard.operator.act.breaker import Breaker
from railyard.operator.act.context import Context
from railyard.operator.base.clock import utc
from railyard.operator.base.keys import ANNOTATION_QUARANTINED_UNTIL, QUARANTINE_TAINT
from railyard.operator.decide.policy import quarantines
from railyard.topology.api import QuarantineRecord, rfc3339
from railyard.topology.faults import NodeLoss
from railyard.topology.timestamps import epoch

log = logging.getLogger("railyard.quarantine")


class Quarantine:
    def __init__(self, ctx: Context, breaker: Breaker) -> None:
        self.ctx = ctx
        self.breaker = breaker

    def plan(self, losses: Sequence[NodeLoss], seconds: float | None = None) -> list[QuarantineRecord]:
        """The quarantines these losses call for (decide/policy.quarantines says which do), to record."""
        if not self.ctx.settings.placement.quarantine or self.breaker.tripped:
            return []
        lasting = self.ctx.settings.placement.quarantine_seconds if seconds is None else seconds
        until = utc(self.ctx.clock.time() + lasting)
        return [QuarantineRecord(node=loss.node, reason=loss.reason, until=until) for loss in losses
                if quarantines(loss.reason) and loss.node in self.ctx.state.health]

    async def apply(self, records: Sequence[QuarantineRecord]) -> None:
        for record in records:
            if record.node in self.ctx.state.health and record.until is not None:
                await self.ctx.api.taint_node(record.node, {"key": QUARANTINE_TAINT, "value": record.reason,
                                                            "effect": "NoSchedule"},
                                              {ANNOTATION_QUARANTINED_UNTIL: rfc3339(record.until)})

    async def lift_expired(self, now: float) -> None:
        for name, health in list(self.ctx.state.health.items()):
            until = health.quarantined_until
            if not until or epoch(until, now) > now or not health.quarantined:
                continue
            if health.faults:
                continue  # a GPU fault quarantine stays while the fault condition is True
            log.info("node %s: quarantine ended (%s); lifting the %s taint", name, until, QUARANTINE_TAINT)
            await self.ctx.api.lift_quarantine(name, QUARANTINE_TAINT, ANNOTATION_QUARANTINED_UNTIL)
