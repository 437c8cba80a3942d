"""Keeps every job off a lost node: the `railyard.dev/unhealthy=<reason>:NoSchedule` taint, until an
admin lifts it (`kubectl taint node NODE railyard.dev/unhealthy-`) or, for a timed quarantine (a
straggler's stragglerPolicy.quarantineSeconds), until the operator lifts it at the time written in
the node's `railyard.dev/quarantined-until` annotation."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from railyard.operator.act.context import Context
from railyard.operator.base.clock import utc
from railyard.operator.base.keys import ANNOTATION_QUARANTINED_UNTIL, QUARANTINE_TAINT
from railyard.topology.api import rfc3339
from railyard.topology.faults import NodeLoss
from railyard.topology.timestamps import epoch

log = logging.getLogger("railyard.quarantine")


class Quarantine:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def taint(self, losses: Sequence[NodeLoss], lift_after: float = 0) -> None:
        if not self.ctx.settings.placement.quarantine:
            return
        until = None
        if lift_after > 0:
            until = {ANNOTATION_QUARANTINED_UNTIL: rfc3339(utc(self.ctx.clock.time() + lift_after))}
        for loss in losses:
            if loss.node in self.ctx.state.health:
                await self.ctx.api.taint_node(loss.node, {"key": QUARANTINE_TAINT, "value": loss.reason,
                                                          "effect": "NoSchedule"}, until)

    async def lift_expired(self, now: float) -> None:
        for name, health in list(self.ctx.state.health.items()):
            until = (health["metadata"].get("annotations") or {}).get(ANNOTATION_QUARANTINED_UNTIL)
            if until and epoch(until, now) <= now:
                log.info("node %s: quarantine ended (%s); lifting the %s taint", name, until, QUARANTINE_TAINT)
                await self.ctx.api.lift_quarantine(name, QUARANTINE_TAINT, ANNOTATION_QUARANTINED_UNTIL)
