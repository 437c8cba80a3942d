"""Deletes a job's pods: with their own grace period (SIGTERM lets a trainer save), except the ones
named in `force` (no kubelet will confirm their end), each with a uid precondition so a successor
that took the name is never deleted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from railyard.operator.act.actor_context import Context
from railyard.operator.base.objects import Key


class PodDeleter:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def delete(self, key: Key, names: Sequence[str], force: Sequence[str] = ()) -> None:
        ns = key[0]
        uids = {p.name: p.uid for p in self.ctx.state.job_pods(key)}
        api = self.ctx.api
        await asyncio.gather(
            *(self.ctx.limited(api.delete_pod, ns, n, uids.get(n)) for n in names if n not in force),
            *(self.ctx.limited(api.delete_pod, ns, n, uids.get(n), grace_seconds=0) for n in force))
