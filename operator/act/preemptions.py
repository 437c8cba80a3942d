"""Gang preemption, carried out: decide/room.py chooses victims (one domain, cheapest first); here each
victim is marked first (write-ahead: Preempted=True, SavingCheckpoint; status.preemptedBy) before anything
is evicted, so a successor operator finishes what this one started; the preemptor's landing nodes are held
for it (its memory's hold) until it is placed or the hold time ends. A marked victim's ranks are asked to
save a step and hold (checkpoint first, at most the checkpoint grace); it is then requeued (Preempted=True,
Preempted), never failed, and resumes from that step when placed again — or, elastic, shrunk and run on. A
victim whose preemptor no longer needs the room (placed, deleted) is let go on. Hot spares lent to
backfilling jobs are reclaimed the same way for a running gang's replacement."""

from __future__ import annotations

import asyncio
import logging

from railyard.operator.act.actor_context import Context
from railyard.operator.act.attempts import Attempts
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.events import Events
from railyard.operator.act.pods import PodDeleter
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import PlacedReason, PreemptedReason, PreemptionOutcome, RestartReason
from railyard.operator.cache.memory import JobMemory
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.holds import Expired, Hold
from railyard.operator.decide.preemption_rules import (
    cancelled,
    describe_plan,
    parse_key,
    shrink_kept,
    victim_message,
)
from railyard.topology.solver.victims import PreemptionPlan

log = logging.getLogger("railyard.preemption")
_NO_HOLD = JobMemory("")


class Victims:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, pods: PodDeleter,
                 checkpoints: Checkpoints, attempts: Attempts) -> None:
        self.ctx = ctx
        self.attempts = attempts
        self.writer = writer
        self.events = events
        self.pods = pods
        self.checkpoints = checkpoints

    async def timed_out(self, expired: list[Expired]) -> None:
        """Holds given up at their deadline (victims stuck terminating, checkpoints slow): the holder cools
        as long before it plans again, and says so."""
        mono = self.ctx.clock.monotonic()
        seconds = self.ctx.settings.preemption.hold_seconds
        for gone in expired:
            job = self.ctx.state.jobs.get(gone.key)
            if job is None:
                continue
            self.ctx.memories.recall(job).cooling_until = mono + seconds
            await self.writer.guard(job.key, self.writer.patch(
                job, transitions.room_timed_out(utc(self.ctx.clock.time() + seconds))))
            if gone.hold.reason == PlacedReason.PREEMPTING:
                metrics.PREEMPTIONS.labels(PreemptionOutcome.TIMED_OUT).inc()
            await self.events.warning(job, gone.hold.reason, gone.message, key="timeout")

    async def start(self, job: Job, plan: PreemptionPlan) -> str:
        """Mark the plan's victims (write-ahead) and keep the hold the pass set for the preemptor (none when a
        victim could not be marked: the next pass plans again); the Placed message."""
        preemptor = f"{job.namespace}/{job.name}"
        now = utc(self.ctx.clock.time())
        summary = describe_plan(plan)
        marked: list[str] = []
        for victim in plan.victims:  # write-ahead: marked before anything is evicted
            target = self.ctx.state.jobs.get(parse_key(victim.key))
            if target is None:
                continue
            message = victim_message(preemptor, summary, self.ctx.settings.preemption.checkpoint_seconds,
                                     victim.shrink_to)
            dropped = None
            if victim.shrink_to is not None and target.placement is not None:  # which ranks, as planned
                at = {(r.node, tuple(r.gpus)): r.rank for r in target.placement.ranks}
                dropped = sorted(at[slot] for slot in victim.slots if slot in at)
            patch = transitions.preemption_chosen(target, preemptor, message, now, victim.shrink_to, dropped)
            if await self.writer.patch(target, patch) is not None:
                marked.append(victim.key)
                await self.events.warning(target, PreemptedReason.SAVING, message, key=f"{preemptor}/{job.uid}")
        if len(marked) < len(plan.victims):
            # A victim could not be marked: no hold on a plan that does not hold. Those marked go on being
            # evicted; the next pass plans again, counting them as leaving for this gang.
            log.info("%s: %d of %d victims marked; planning again", preemptor, len(marked), len(plan.victims))
            self.ctx.memories.recall(job).hold = None
            return "choosing victims"
        metrics.PREEMPTIONS.labels(PreemptionOutcome.PLANNED).inc()
        await self.events.normal(job, PlacedReason.PREEMPTING, f"evicting {summary}", key=",".join(marked))
        log.info("%s preempts %s", preemptor, summary)
        return f"evicting {summary}; the domain is held for it"

    # --- spares -----------------------------------------------------------------------------------------

    async def reclaim(self, job: Job, victims: tuple[Key, ...], hold: Hold, message: str) -> None:
        """Hot spares lent to backfilling jobs go back to a running gang that lost nodes
        (decide/restart_plan.plan_spares): the lenders are marked (they save a step, then are requeued)
        and their nodes held for the gang."""
        self.ctx.memories.recall(job).hold = hold
        by = f"{job.namespace}/{job.name}"
        now = utc(self.ctx.clock.time())
        for key in victims:
            victim = self.ctx.state.jobs.get(key)
            if victim is None:
                continue
            if await self.writer.patch(victim, transitions.preemption_chosen(victim, by, message, now)) is not None:
                await self.events.warning(victim, PreemptedReason.SAVING, message,
                                          key=f"spare/{by}/{job.restart_count}")
        metrics.PREEMPTIONS.labels(PreemptionOutcome.PLANNED).inc()
        log.info("%s reclaims spares from %s", by, ", ".join(hold.victims))

    # --- victims ---------------------------------------------------------------------------------------

    async def evict(self, job: Job) -> None:
        """A marked victim: let it go on if its preemptor no longer needs the room; else, once its
        ranks saved a step (or the grace ran out), requeue it and delete its pods."""
        now = self.ctx.clock.time()
        by = job.status.preempted_by or ""
        preemptor = self.ctx.state.jobs.get(parse_key(by)) if by else None
        holds = preemptor is not None and (self.ctx.memories.peek(preemptor) or _NO_HOLD).hold is not None
        if (why := cancelled(preemptor, holds)) is not None:
            message = f"preemption for {by or 'an unknown job'} cancelled: {why}; the job runs on"
            self.checkpoints.end(job, self.ctx.memories.recall(job))
            if await self.writer.patch(job, transitions.preemption_cancelled(job, message, utc(now))) is not None:
                metrics.PREEMPTIONS.labels(PreemptionOutcome.CANCELLED).inc()
                await self.events.normal(job, PreemptedReason.CANCELLED, message)
            return
        if not self.checkpoints.saved_first(job, self.ctx.settings.preemption.checkpoint_seconds):
            asyncio.get_running_loop().call_later(1.0, self.writer.wake)
            return
        checkpoint = self.checkpoints.committed(job)
        resume = f"; resumes from step {checkpoint.step}" if checkpoint is not None else \
            "; no checkpoint committed: restarts from the beginning"
        if job.status.shrink_to is not None and job.status.shrink_ranks and \
                await self._shrink(job, by, job.status.shrink_to, set(job.status.shrink_ranks), resume):
            return
        message = f"preempted by {by} (higher priority){resume}; requeued"
        everyone = tuple(p.name for p in self.ctx.state.job_pods(job.key) if not p.terminating)
        if await self.writer.patch(job, transitions.preempted(job, message, checkpoint, utc(now))) is None:
            return
        metrics.PREEMPTIONS.labels(PreemptionOutcome.EVICTED).inc()
        await self.events.warning(job, PreemptedReason.PREEMPTED, message)
        await self.pods.delete(job.key, everyone)


    async def _shrink(self, job: Job, by: str, size: int, dropping: set[int], resume: str) -> bool:
        """An elastic victim keeps `size` replicas and runs on (a new attempt, as a resize), dropping the
        ranks the plan chose (inside the domain being cleared). False when that no longer makes sense (its
        placement changed, or a kept rank's node is gone or unusable): then it is evicted whole."""
        kept = shrink_kept(job, size, dropping, self.ctx.state.snapshot())
        if kept is None or job.placement is None:
            return False
        ranks = sorted(r.rank for r in job.placement.ranks)
        moved = sum(1 for i, rank in enumerate(r for r in ranks if r not in dropping) if rank != i)
        message = f"shrunk from {len(ranks)} to {size} replicas for {by} (higher priority){resume}"
        now = utc(self.ctx.clock.time())
        if await self.attempts.record(job, RestartReason.PREEMPTED, message, kept, {"moved_ranks": moved},
                                      conditions=transitions.shrunk_for_preemption(job, message, now),
                                      preemptions=transitions.recent_and_now(job.status.preemptions, now)) is None:
            return True
        metrics.PREEMPTIONS.labels(PreemptionOutcome.SHRUNK).inc()
        await self.events.warning(job, PreemptedReason.SHRUNK, message)
        await self.attempts.replace_pods(job, tuple(p.name for p in self.ctx.state.job_pods(job.key)
                                                    if not p.terminating))
        return True
