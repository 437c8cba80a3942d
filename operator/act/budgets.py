"""Each released gang's PodDisruptionBudget (decide/builders.disruption_budget): created once per job
and operator lifetime, kept by the API server with the job (owner reference). It is what makes
`kubectl drain` wait while the gang saves a step and moves (decide/assess: planned maintenance). Only
with RAILYARD_DISRUPTION_BUDGETS (the chart sets it with its eviction webhook)."""

from __future__ import annotations

import logging

from railyard.operator.act.actor_context import Context
from railyard.operator.base.objects import Job
from railyard.operator.decide.builders import disruption_budget

log = logging.getLogger("railyard.budgets")


class Budgets:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def done(self, job: Job) -> bool:
        """Nothing for `ensure` to do (asked every pass for every running job, before making it a task)."""
        memory = self.ctx.memories.peek(job)
        return (memory is not None and memory.budgeted) or not self.ctx.settings.maintenance.disruption_budgets

    async def ensure(self, job: Job) -> None:
        if self.done(job):
            return
        memory = self.ctx.memories.recall(job)
        try:
            created, existing = await self.ctx.limited(self.ctx.api.create, "poddisruptionbudgets",
                                                             disruption_budget(job))
        except Exception as e:  # RBAC without policy/poddisruptionbudgets (an older chart): said once
            log.warning("job %s/%s: no PodDisruptionBudget (%s); a drain of its nodes will not wait for a "
                        "checkpoint", job.namespace, job.name, e)
            memory.budgeted = True
            return
        owners = ((existing or {}).get("metadata") or {}).get("ownerReferences") or []
        if not created and existing is not None and not any(o.get("uid") == job.uid for o in owners):
            log.warning("job %s/%s: a PodDisruptionBudget of its name belongs to someone else; a drain of its "
                        "nodes will not wait for a checkpoint", job.namespace, job.name)
        memory.budgeted = created or existing is not None
