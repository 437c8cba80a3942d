"""Keeps every job off a node that failed under a gang: the `railyard.dev/unhealthy=<reason>:NoSchedule`
taint (the solver excludes such a node whatever a job tolerates) with the time it ends in the node's
`railyard.dev/quarantined-until` annotation (RAILYARD_QUARANTINE_SECONDS, an hour by default; a
straggler's stragglerPolicy.quarantineSeconds, never past RAILYARD_QUARANTINE_MAX_SECONDS) and when it
began in `railyard.dev/quarantined-at`. The operator lifts both when the time has passed — a
GPU-fault quarantine only once no GPU fault condition is True any more; an admin may lift it earlier
(`kubectl taint node NODE railyard.dev/unhealthy-`). Which nodes, within the operator's limits, a restart
decides (decide/restart_plan.plan_quarantine); a quarantine it skips is logged and an Event on the job says
why (the job still moves off the node). Quarantines are part of a restart's write-ahead record
(lastRestart.quarantine), so a successor applies what its predecessor decided."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from railyard.operator.act.actor_context import Context
from railyard.operator.base.clock import utc
from railyard.operator.base.keys import ANNOTATION_QUARANTINED_AT, ANNOTATION_QUARANTINED_UNTIL, QUARANTINE_TAINT
from railyard.operator.base.objects import Job
from railyard.operator.decide.quarantine_limits import in_last_hour, quarantines_over
from railyard.topology.api.job import QuarantineRecord, rfc3339
from railyard.topology.api.timestamps import epoch
from railyard.topology.cluster.faults import LossReason

log = logging.getLogger("railyard.quarantine")


class Quarantine:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._straggler_at: dict[str, float] = {}  # node -> when this operator planned its straggler quarantine

    def planned(self, records: Sequence[QuarantineRecord]) -> None:
        """Straggler quarantines just decided count against the hourly cap before their annotations are seen."""
        now = self.ctx.clock.time()
        for record in records:
            if record.reason == LossReason.STRAGGLER:
                self._straggler_at[record.node] = now

    def corroborating(self, job: Job, node: str) -> int:
        """Other jobs that find the node slow too (their own reports, their own status)."""
        return sum(1 for other in self.ctx.state.jobs.values()
                   if other.uid != job.uid and any(s.node == node for s in other.status.stragglers or []))

    def straggler_quarantines(self, now: float) -> int:
        """Straggler quarantines begun in the last hour, cluster-wide."""
        return len(self._straggler_quarantines(now))

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
        for name, until in quarantines_over(self.ctx.state.health, now):
            log.info("node %s: quarantine ended (%s); lifting the %s taint", name, until, QUARANTINE_TAINT)
            await self.ctx.api.lift_quarantine(name, QUARANTINE_TAINT,
                                               (ANNOTATION_QUARANTINED_UNTIL, ANNOTATION_QUARANTINED_AT))
