"""Defragmentation, carried out (opt-in: RAILYARD_DEFRAGMENTATION, and per job spec.preemption.migratable):
decide/room.py plans moving running gangs out of one domain so a queued gang that fits by free GPUs lands
there; the pass holds the landing nodes for it and records each mover's move in its memory. Here: the
movers are told (an Event), each mover's assessment learns which nodes to leave (`leaving`, Seen.leaving),
so `assess` answers a planned restart (LossReason.MIGRATION) that act/recovery.py carries out as a planned
move (its ranks save a step first, the ranks on those nodes are re-homed outside the held nodes, nothing is
quarantined, the gang resumes from the saved step). Bounded: at most RAILYARD_MIGRATIONS_PER_HOUR moves, a
job moved at most once per RAILYARD_MIGRATION_INTERVAL_SECONDS (status.lastMigration, so an operator restart
does not reset it). A move whose waiting gang was placed, deleted or timed out is called off, as is one that
finds no room outside (the mover keeps running)."""

from __future__ import annotations

import logging

from railyard.operator.act.actor_context import Context
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.events import Events
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import EventReason, PlacedReason
from railyard.operator.cache.memory import moves
from railyard.operator.decide.holds import settle_moves, waiting_for
from railyard.operator.decide.preemption_rules import parse_key
from railyard.topology.solver.defrag import MigrationPlan

log = logging.getLogger("railyard.migration")


class Moves:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, checkpoints: Checkpoints) -> None:
        self.ctx = ctx
        self.checkpoints = checkpoints
        self.writer = writer
        self.events = events

    @property
    def active(self) -> bool:
        """Any gang is to move (a running gang's assessment depends on whether it is one of them)."""
        return bool(moves(self.ctx.memories, self.ctx.state.jobs))

    def leaving(self, job: Job) -> tuple[frozenset[str], str]:
        """The nodes this job is to leave now, and for whom (`prune` has dropped moves done or off)."""
        memory = self.ctx.memories.peek(job)
        move = memory.move if memory is not None else None
        if move is None:
            return frozenset(), ""
        return move.nodes, f"{move.waiting[0]}/{move.waiting[1]}"

    async def prune(self) -> None:
        """Moves done (the mover restarted) are forgotten; moves no longer wanted (the waiting gang was
        placed, deleted, or its time ran out) are called off: the mover's ranks stop holding for the
        step they were asked to save, and an Event says so."""
        jobs = self.ctx.state.jobs
        done, off = settle_moves(moves(self.ctx.memories, jobs), jobs, self.ctx.clock.monotonic())
        for key in done:
            if key in jobs:
                self.ctx.memories.recall(jobs[key]).move = None
        for key, why in off:
            await self.no_room(jobs[key], why)

    async def no_room(self, job: Job, why: str) -> None:
        """The move is off (no room outside the held nodes when it came to it, or no longer wanted): the
        mover runs on; once the waiting gang has no move left, its hold goes too (nothing sits idle)."""
        memory = self.ctx.memories.recall(job)
        move, memory.move = memory.move, None
        if move is None:
            return
        self.checkpoints.end(job, memory)
        await self.events.normal(job, EventReason.MIGRATION_CANCELLED, f"move called off: {why}; it runs on")
        if not waiting_for(moves(self.ctx.memories, self.ctx.state.jobs).values(), move.waiting):
            waiting = self.ctx.state.jobs.get(move.waiting)
            if waiting is not None:
                self.ctx.memories.recall(waiting).hold = None

    async def start(self, job: Job, plan: MigrationPlan, summary: str) -> None:
        """Tell each mover what to leave and the waiting gang what moves for it (the pass recorded the moves
        and the hold)."""
        where = f"{plan.level} {plan.domain}"
        waiting = f"{job.namespace}/{job.name}"
        for move in plan.moves:
            mover = self.ctx.state.jobs.get(parse_key(move.key))
            if mover is None:
                continue
            targets = ", ".join(sorted({r.new for r in move.replacements}))
            await self.events.normal(mover, EventReason.MIGRATING,
                                     f"moves off {', '.join(move.leaves)} (to {targets}) so {waiting} fits in "
                                     f"{where}; its ranks save a step first", key=f"{waiting}/{job.uid}")
        await self.events.normal(job, PlacedReason.DEFRAGMENTING, summary, key=",".join(m.key for m in plan.moves))
        log.info("%s: %s", waiting, summary)
        self.writer.wake()

