"""Defragmentation (opt-in: RAILYARD_DEFRAGMENTATION, and per job spec.preemption.migratable): a
queued gang that fits by free GPUs but not by topology has running gangs moved out of one domain so
it lands there (the plan: topology/defrag.py).

Carrying a plan out: the waiting gang's landing nodes are held for it (as for a preemptor); each mover
is told which of its nodes to leave (Seen.leaving), so `assess` answers a planned restart
(LossReason.MIGRATION) that act/recovery carries out as a planned move: its ranks save a step first,
the ranks on those nodes are re-homed outside the held nodes, nothing is quarantined, and the gang
resumes from the saved step. Bounded: at most RAILYARD_MIGRATIONS_PER_HOUR moves, a job moved at most
once per RAILYARD_MIGRATION_INTERVAL_SECONDS (status.lastMigration, so an operator restart does
not reset it). A move whose waiting gang was placed, deleted or timed out is called off, as is one
that finds no room outside (the mover keeps running).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.context import Context
from railyard.operator.act.events import Events
from railyard.operator.act.preemption import Hold, Preemptions
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import ConditionType, EventReason, PlacedReason
from railyard.operator.decide.preemption import HOUR, lost_gpu_seconds, parse_key
from railyard.operator.decide.priority import resolve
from railyard.operator.decide.queue import QueuedJob
from railyard.topology.defrag import MigrationPlan, Mover, fits_by_gpus, plan_migration
from railyard.topology.model import Snapshot
from railyard.topology.preemption import RunningGang

log = logging.getLogger("railyard.migration")


@dataclass(frozen=True)
class PendingMove:
    nodes: frozenset[str]  # the mover's nodes to leave
    waiting: Key  # the gang it makes room for
    restart_count: int  # the mover's attempt when asked: a later one has moved
    until: float  # monotonic: called off after this


class Migrations:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, preemptions: Preemptions,
                 checkpoints: Checkpoints) -> None:
        self.ctx = ctx
        self.checkpoints = checkpoints
        self.writer = writer
        self.events = events
        self.preemptions = preemptions
        self._moves: dict[Key, PendingMove] = {}
        self._recent: list[float] = []  # monotonic times of the moves started (the hourly cap)

    @property
    def active(self) -> bool:
        """Any gang is to move (a running gang's assessment depends on whether it is one of them)."""
        return bool(self._moves)

    def leaving(self, job: Job) -> tuple[frozenset[str], str]:
        """The nodes this job is to leave now, and for whom (`prune` has dropped moves done or off)."""
        move = self._moves.get(job.key)
        if move is None:
            return frozenset(), ""
        return move.nodes, f"{move.waiting[0]}/{move.waiting[1]}"

    async def prune(self) -> None:
        """Moves done (the mover restarted) are forgotten; moves no longer wanted (the waiting gang was
        placed, deleted, or its time ran out) are called off: the mover's ranks stop holding for the
        step they were asked to save, and an Event says so."""
        mono = self.ctx.clock.monotonic()
        for key, move in list(self._moves.items()):
            job = self.ctx.state.jobs.get(key)
            if job is None or job.restart_count != move.restart_count:
                del self._moves[key]
                continue
            waiting = self.ctx.state.jobs.get(move.waiting)
            if waiting is None or waiting.deleting:
                why = "the gang it made room for is gone"
            elif waiting.placement is not None:
                why = "the gang it made room for was placed"
            elif mono > move.until:
                why = "its time ran out (RAILYARD_PREEMPTION_HOLD_SECONDS)"
            else:
                continue
            await self.no_room(job, why)

    async def no_room(self, job: Job, why: str) -> None:
        """The move is off (no room outside the held nodes when it came to it, or no longer wanted): the
        mover runs on; once the waiting gang has no move left, its hold goes too (nothing sits idle)."""
        move = self._moves.pop(job.key, None)
        if move is None:
            return
        self.checkpoints.end(job, self.ctx.memories.recall(job))
        await self.events.normal(job, EventReason.MIGRATION_CANCELLED, f"move called off: {why}; it runs on")
        if not any(m.waiting == move.waiting for m in self._moves.values()):
            self.preemptions.release(move.waiting)

    def _movers(self, priority: int, exclude: Key, now: float) -> list[Mover]:
        state, settings = self.ctx.state, self.ctx.settings.placement
        out = []
        for key, job in state.jobs.items():
            spec, placement, request = job.spec, job.placement, job.request
            if key == exclude or key in self._moves or job.deleting or job.finished or spec is None or \
                    placement is None or request is None or not spec.preemption.migratable:
                continue
            placed = job.condition(ConditionType.PLACED)
            if placed is None or placed.reason != PlacedReason.RELEASED or job.is_true(ConditionType.PREEMPTED):
                continue
            own = resolve(job.priority_class_name, state.priority_classes)
            if own is None or own.value > priority:
                continue
            moved = job.status.last_migration
            if moved is not None and now - moved.timestamp() < settings.migration_interval_seconds:
                continue  # moved recently: never twice within the interval
            restart = job.status.last_restart
            slots = tuple((r.node, tuple(r.gpus)) for r in sorted(placement.ranks, key=lambda r: r.rank))
            gpus = sum(len(g) for _, g in slots)
            began = restart.released_at if restart is not None and restart.released_at is not None else \
                job.status.start_time
            saved = job.status.last_checkpoint.time if job.status.last_checkpoint is not None else began
            lost = lost_gpu_seconds(gpus, saved.timestamp() if saved is not None else None, now)
            out.append(Mover(RunningGang(f"{key[0]}/{key[1]}", own.value, slots, lost, dict(request.resources)),
                             request))
        return out

    def plan(self, job: Job, candidate: QueuedJob, view: Snapshot, now: float) -> MigrationPlan | None:
        settings = self.ctx.settings.placement
        mono = self.ctx.clock.monotonic()
        if not settings.defragmentation or self.preemptions.holding(candidate.key) is not None or \
                self.preemptions.cooling(candidate.key):
            return None
        self._recent = [t for t in self._recent if mono - t < HOUR]
        if len(self._recent) >= settings.migrations_per_hour or not fits_by_gpus(view, candidate.request):
            return None
        movers = [m for m in self._movers(candidate.priority, candidate.key, now)
                  if all(view.has_node(n) for n in m.gang.nodes)]
        plan = plan_migration(view, candidate.request, movers)
        if plan is None or len(self._recent) + len(plan.moves) > settings.migrations_per_hour:
            return None
        return plan

    async def start(self, job: Job, plan: MigrationPlan) -> str:
        """Hold where the gang lands, tell each mover what to leave; the waiting gang's Placed message."""
        mono = self.ctx.clock.monotonic()
        hold_seconds = self.ctx.settings.placement.preemption_hold_seconds
        names = tuple(m.key for m in plan.moves)
        landing = frozenset(r.node for r in plan.placement.replicas)
        self.preemptions.hold(job.key, Hold(landing, names, mono + hold_seconds,
                                            reason=PlacedReason.DEFRAGMENTING))
        where = f"{plan.level} {plan.domain}"
        summary = (f"moving {', '.join(names)} out of {where} "
                   f"({plan.lost_gpu_seconds / 3600:.2f} GPU-hours since their last checkpoints), then it lands there")
        waiting = f"{job.namespace}/{job.name}"
        for move in plan.moves:
            key = parse_key(move.key)
            mover = self.ctx.state.jobs.get(key)
            if mover is None:
                continue
            self._moves[key] = PendingMove(frozenset(move.leaves), job.key, mover.restart_count, mono + hold_seconds)
            self._recent.append(mono)
            targets = ", ".join(sorted({r.new for r in move.replacements}))
            await self.events.normal(mover, EventReason.MIGRATING,
                                     f"moves off {', '.join(move.leaves)} (to {targets}) so {waiting} fits in "
                                     f"{where}; its ranks save a step first", key=f"{waiting}/{job.uid}")
        await self.events.normal(job, PlacedReason.DEFRAGMENTING, summary, key=",".join(names))
        log.info("%s: %s", waiting, summary)
        self.writer.wake()
        return summary
