"""Gang preemption: a queued gang that does not fit takes the place of whole lower-priority gangs.

The victims are chosen by `topology.preemption.plan_preemption` (one domain, cheapest first). Then,
write-ahead: each victim is marked (Preempted=True, SavingCheckpoint; status.preemptedBy) before
anything is evicted, so a successor operator finishes what this one started. The preemptor's target
nodes are held for it (no other job lands there) until it is placed or the hold time ends. A marked
victim's ranks are asked to save a step and hold (checkpoint first, at most the checkpoint grace); it
is then requeued (Preempted=True, Preempted), never failed, and resumes from that step when placed
again. A victim whose preemptor no longer needs the room (placed, deleted) is let go on.

Planning looks past what is already leaving (Terminating pods, marked victims): a preemptor that fits
once they have gone waits for them and chooses nobody new, so evictions are never wasted by
switching domains between passes, and an operator restart does not pick a second set of victims.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from railyard.operator.act.attempts import Attempts
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.context import Context
from railyard.operator.act.events import Events
from railyard.operator.act.pods import PodDeleter
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import (
    ConditionStatus,
    ConditionType,
    PlacedReason,
    PreemptedReason,
    PreemptionOutcome,
    RestartReason,
)
from railyard.operator.decide import status as transitions
from railyard.operator.decide.preemption import (
    describe_plan,
    lost_gpu_seconds,
    parse_key,
    recent_preemptions,
    shrink_sizes,
    victim_message,
)
from railyard.operator.decide.priority import may_preempt, resolve
from railyard.operator.decide.queue import QueuedJob
from railyard.topology.api import Parallelism
from railyard.topology.elastic import valid_size
from railyard.topology.model import Snapshot
from railyard.topology.preemption import PreemptionPlan, RunningGang, plan_preemption
from railyard.topology.replace import RankSlot
from railyard.topology.solver import solve

log = logging.getLogger("railyard.preemption")


@dataclass(frozen=True)
class Hold:
    """Nodes held for a preemptor while its victims leave (monotonic deadline)."""

    nodes: frozenset[str]
    victims: tuple[str, ...]
    until: float
    spare: bool = False  # for a running gang's replacement (its spares lent to backfilling jobs)
    reason: PlacedReason = PlacedReason.PREEMPTING  # or DEFRAGMENTING: what the holder's Placed says


class Preemptions:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, pods: PodDeleter,
                 checkpoints: Checkpoints, attempts: Attempts) -> None:
        self.ctx = ctx
        self.attempts = attempts
        self.writer = writer
        self.events = events
        self.pods = pods
        self.checkpoints = checkpoints
        self._holds: dict[Key, Hold] = {}
        self._cooling: dict[Key, float] = {}  # monotonic: a timed-out preemptor plans again after this
        # Asked per waiting gang every pass, kept while no job or PriorityClass changes (jobs' epoch):
        # the lowest priority of a placed gang, and which gangs were preempted for whom.
        self._lowest: tuple[int, int | None] | None = None
        self._victims_of: tuple[int, dict[str, list[Key]]] | None = None

    # --- holds ---------------------------------------------------------------------------------------

    def held_for_others(self, key: Key) -> frozenset[str]:
        """Nodes held for every preemptor but this job."""
        out: set[str] = set()
        for holder, hold in self._holds.items():
            if holder != key:
                out |= hold.nodes
        return frozenset(out)

    def holding(self, key: Key) -> Hold | None:
        return self._holds.get(key)

    def hold(self, key: Key, hold: Hold) -> None:
        """Hold nodes for a gang (a preemptor, a gang being defragmented for, a replacement)."""
        self._holds[key] = hold

    def placed(self, key: Key) -> None:
        """The gang is placed (or restarted): its hold served its purpose."""
        self._holds.pop(key, None)

    release = placed  # a hold nothing is coming for any more (its moves were all called off)

    def cooling(self, key: Key) -> bool:
        """Its last hold timed out recently: it plans no new preemption or moves until the cooling ends."""
        return self._cooling.get(key, 0.0) > self.ctx.clock.monotonic()

    async def expire(self, mono: float) -> None:
        """Holds past their time (victims stuck terminating, checkpoints slow) are given up, saying so."""
        for key, hold in list(self._holds.items()):
            job = self.ctx.state.jobs.get(key)
            if job is None or job.deleting or (job.placement is not None and not hold.spare):
                del self._holds[key]
                continue
            if mono < hold.until:
                continue
            del self._holds[key]
            seconds = self.ctx.settings.placement.preemption_hold_seconds
            if hold.spare:  # a running gang's restart goes ahead from what is free (recovery)
                continue
            self._cooling[key] = mono + seconds
            gone = "stay requeued" if hold.reason == PlacedReason.PREEMPTING else "run on where they are"
            message = (f"the nodes held for it ({len(hold.nodes)}) were not free within {seconds:.0f}s "
                       f"(RAILYARD_PREEMPTION_HOLD_SECONDS): released; {', '.join(hold.victims) or 'nobody'} {gone}")
            if hold.reason == PlacedReason.PREEMPTING:
                metrics.PREEMPTIONS.labels(PreemptionOutcome.TIMED_OUT).inc()
            await self.events.warning(job, hold.reason, message, key="timeout")

    # --- planning --------------------------------------------------------------------------------------

    def _candidates(self, priority: int, exclude: Key, now: float) -> list[RunningGang]:
        """Running gangs of lower priority that may be evicted now (under the hourly cap, not already marked)."""
        state, settings = self.ctx.state, self.ctx.settings.placement
        lowest = self._lowest_placed_priority()
        if lowest is None or lowest >= priority:
            return []  # on most clusters most gangs share a priority: nobody to evict, no scan
        out = []
        for key, job in state.jobs.items():
            if key == exclude or job.deleting or job.finished or job.placement is None or job.spec is None:
                continue
            own = resolve(job.priority_class_name, state.priority_classes)
            if own is None or own.value >= priority:
                continue  # first: on most clusters most gangs share a priority (asked per waiting gang)
            placed = job.condition(ConditionType.PLACED)
            if placed is None or placed.reason != PlacedReason.RELEASED or job.is_true(ConditionType.PREEMPTED):
                continue
            if len(recent_preemptions(job.status.preemptions, now)) >= settings.preemptions_per_hour:
                continue
            ranks = sorted(job.placement.ranks, key=lambda r: r.rank)
            slots = tuple((r.node, tuple(r.gpus)) for r in ranks)
            gpus = sum(len(g) for _, g in slots)
            request, spec = job.request, job.spec
            gpus_per_replica, parallelism = spec.gpus_per_replica, spec.parallelism

            def valid(n: int, g: int = gpus_per_replica, p: Parallelism | None = parallelism) -> bool:
                return valid_size(n, g, p)

            sizes = shrink_sizes(len(slots), spec.effective_min_replicas, valid)
            out.append(RunningGang(f"{key[0]}/{key[1]}", own.value, slots,
                                   lost_gpu_seconds(gpus, self._last_saved(job), now),
                                   dict(request.resources) if request is not None else {}, sizes))
        return out

    def might_preempt_for(self, priority: int) -> bool:
        """Whether some placed gang has a lower priority than this (one that does not fit may evict it)."""
        lowest = self._lowest_placed_priority()
        return lowest is not None and lowest < priority

    def _lowest_placed_priority(self) -> int | None:
        state = self.ctx.state
        if self._lowest is None or self._lowest[0] != state.jobs_epoch:
            values = [p.value for job in state.jobs.values() if job.placement is not None and not job.finished
                      and (p := resolve(job.priority_class_name, state.priority_classes)) is not None]
            self._lowest = (state.jobs_epoch, min(values, default=None))
        return self._lowest[1]

    def _preempted_for(self, preemptor: str) -> list[Key]:
        """The gangs whose status says they were preempted for `preemptor` (namespace/name)."""
        state = self.ctx.state
        if self._victims_of is None or self._victims_of[0] != state.jobs_epoch:
            victims: dict[str, list[Key]] = {}
            for key, job in state.jobs.items():
                if job.status.preempted_by:
                    victims.setdefault(job.status.preempted_by, []).append(key)
            self._victims_of = (state.jobs_epoch, victims)
        return self._victims_of[1].get(preemptor, [])

    def _last_saved(self, job: Job) -> float | None:
        """When the work the gang would keep was saved: its last committed checkpoint, else the start
        of its current attempt (everything since would be recomputed)."""
        committed = self.checkpoints.committed(job)
        if committed is not None and committed.time is not None and committed.restart_count == job.restart_count:
            return committed.time.timestamp()
        restart = job.status.last_restart
        began = restart.released_at if restart is not None and restart.released_at is not None else \
            job.status.start_time
        return began.timestamp() if began is not None else None

    def _leaving(self, key: Key, only_for: str | None) -> list[tuple[str, tuple[int, ...], Mapping[str, int]]]:
        """GPUs (and requests) on their way out: Terminating pods, and gangs marked as victims; with
        `only_for`, only those of gangs preempted for that gang (namespace/name)."""
        jobs = self.ctx.state.jobs
        chosen = None if only_for is None else self._preempted_for(only_for)
        if chosen == []:
            return []  # nobody was preempted for that gang (asked every pass for every gang that waits)
        out = list(self.ctx.state.leaving(chosen))
        for other, job in jobs.items():
            if other == key or job.placement is None or not _saving(job):
                continue
            if only_for is not None and job.status.preempted_by != only_for:
                continue
            resources = dict(job.request.resources) if job.request is not None else {}
            dropping = set(job.status.shrink_ranks or ()) if job.status.shrink_to is not None else None
            out += [(r.node, tuple(r.gpus), resources) for r in job.placement.ranks
                    if dropping is None or r.rank in dropping]  # a shrink frees only the ranks it drops
        return out

    @staticmethod
    def _without(view: Snapshot, leaving: list[tuple[str, tuple[int, ...], Mapping[str, int]]]) -> Snapshot:
        for node, gpus, requests in leaving:
            if view.has_node(node):
                view = view.release([(node, tuple(g for g in gpus if g in view.used.get(node, frozenset())))],
                                    requests)
        return view

    def plan(self, job: Job, candidate: QueuedJob, view: Snapshot, now: float) -> PreemptionPlan | Hold | None:
        """For a queued gang that did not fit on `view`: a plan whose victims are to be evicted; a Hold
        (it fits once the gangs preempted for it have gone: wait for them, evict nobody new); or None
        (it fits once what others are leaving has gone, or nobody can make room)."""
        settings = self.ctx.settings.placement
        mono = self.ctx.clock.monotonic()
        if not settings.preemption or job.spec is None or candidate.key in self._holds or self.cooling(candidate.key):
            return None
        priority = resolve(job.priority_class_name, self.ctx.state.priority_classes)
        if priority is None or not may_preempt(priority, job.spec.preemption.policy):
            return None
        me = f"{job.namespace}/{job.name}"
        mine = self._leaving(candidate.key, me)
        if mine:  # victims chosen for it before (this operator's, or a predecessor's) are still leaving
            waiting = solve(self._without(view, mine), candidate.request).placement
            if waiting is not None:
                names = tuple(sorted({f"{k[0]}/{k[1]}" for k, j in self.ctx.state.jobs.items()
                                      if j.status.preempted_by == me}))
                return Hold(frozenset(r.node for r in waiting.replicas), names,
                            mono + settings.preemption_hold_seconds)
        candidates = [c for c in self._candidates(candidate.priority, candidate.key, now) if
                      all(view.has_node(n) for n in c.nodes)]
        if not candidates:
            return None  # nobody it may evict: no solve spent on it
        after = self._without(view, self._leaving(candidate.key, None))
        if solve(after, candidate.request).placed:
            return None  # room is coming anyway: nobody new is evicted for it
        return plan_preemption(after, candidate.request, candidates)

    async def start(self, job: Job, plan: PreemptionPlan | Hold) -> str:
        """Hold the target for the preemptor and mark its victims (write-ahead); the Placed message."""
        mono = self.ctx.clock.monotonic()
        hold_seconds = self.ctx.settings.placement.preemption_hold_seconds
        if isinstance(plan, Hold):
            self._holds[job.key] = plan
            return f"waiting for {len(plan.nodes)} nodes that lower-priority gangs are leaving (held for it)"
        preemptor = f"{job.namespace}/{job.name}"
        now = utc(self.ctx.clock.time())
        summary = describe_plan(plan)
        marked: list[str] = []
        for victim in plan.victims:  # write-ahead: marked before anything is evicted
            target = self.ctx.state.jobs.get(parse_key(victim.key))
            if target is None:
                continue
            message = victim_message(preemptor, summary, self.ctx.settings.placement.preemption_checkpoint_seconds,
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
            return "choosing victims"
        # Held: where it will land, not the whole domain (nothing else waits for no reason).
        landing = frozenset(r.node for r in plan.placement.replicas)
        self._holds[job.key] = Hold(landing, tuple(marked), mono + hold_seconds)
        metrics.PREEMPTIONS.labels(PreemptionOutcome.PLANNED).inc()
        await self.events.normal(job, PlacedReason.PREEMPTING, f"evicting {summary}", key=",".join(marked))
        log.info("%s preempts %s", preemptor, summary)
        return f"evicting {summary}; the domain is held for it"

    # --- spares -----------------------------------------------------------------------------------------

    async def reclaim_spares(self, job: Job, lost: list[str]) -> bool:
        """A running gang lost these nodes and its TORs' spares are lent to backfilling jobs: evict those
        (checkpoint first) and hold their nodes for it. True while the gang should wait for them."""
        settings = self.ctx.settings.placement
        if settings.spares_per_tor <= 0 or not lost:
            return False
        mono = self.ctx.clock.monotonic()
        hold = self._holds.get(job.key)
        if hold is not None and hold.spare:
            if mono >= hold.until:
                return False  # they did not go in time: replace from what is free
            state = self.ctx.state
            gone = all(not any(p.node_name in hold.nodes for p in state.job_pods(parse_key(v)))
                       for v in hold.victims)
            return not gone
        state = self.ctx.state
        models = {n: state.last_model[n] for n in lost if n in state.last_model}
        need: dict[str, int] = {}
        for model in models.values():
            need[model.tor] = need.get(model.tor, 0) + 1
        snapshot = state.snapshot()
        free: dict[str, int] = {}
        for node in snapshot.nodes:
            if node.name not in lost and node.tor in need and len(snapshot.free(node)) == node.gpu_count:
                free[node.tor] = free.get(node.tor, 0) + 1
        missing = {tor: count - free.get(tor, 0) for tor, count in need.items() if free.get(tor, 0) < count}
        if not missing:
            return False
        own = resolve(job.priority_class_name, state.priority_classes)
        now_wall = self.ctx.clock.time()
        options: list[tuple[float, str, Job, set[str]]] = []
        for key, other in state.jobs.items():
            if key == job.key or other.placement is None or other.spec is None or _saving(other) or \
                    other.finished or other.deleting or not other.spec.preemption.backfill_spares:
                continue
            theirs = resolve(other.priority_class_name, state.priority_classes)
            if own is None or theirs is None or theirs.value > own.value or \
                    len(recent_preemptions(other.status.preemptions, now_wall)) >= settings.preemptions_per_hour:
                continue
            whole = {r.node for r in other.placement.ranks if (m := state.nodes.get(r.node)) is not None
                     and m.tor in missing and len(r.gpus) == m.gpu_count}
            if whole:
                gpus = sum(len(r.gpus) for r in other.placement.ranks)
                options.append((lost_gpu_seconds(gpus, self._last_saved(other), now_wall), f"{key}", other, whole))
        victims: list[Job] = []
        nodes: set[str] = set()
        for _, _, other, whole in sorted(options, key=lambda o: (o[0], o[1])):  # the least work lost first
            if all(sum(1 for n in nodes if state.nodes[n].tor == tor) >= count for tor, count in missing.items()):
                break
            victims.append(other)
            nodes |= whole
        if not victims:
            return False
        names = tuple(f"{v.namespace}/{v.name}" for v in victims)
        self._holds[job.key] = Hold(frozenset(nodes), names, mono + settings.preemption_hold_seconds, spare=True)
        by = f"{job.namespace}/{job.name}"
        now = utc(self.ctx.clock.time())
        message = (f"preempted by {by}: it lost nodes in TOR {', '.join(sorted(missing))} and needs the hot spares "
                   f"this job backfilled; its ranks save a step first (at most "
                   f"{settings.preemption_checkpoint_seconds:.0f}s), then it is requeued")
        for victim in victims:
            if await self.writer.patch(victim, transitions.preemption_chosen(victim, by, message, now)) is not None:
                await self.events.warning(victim, PreemptedReason.SAVING, message,
                                          key=f"spare/{by}/{job.restart_count}")
        metrics.PREEMPTIONS.labels(PreemptionOutcome.PLANNED).inc()
        log.info("%s reclaims spares from %s", by, ", ".join(names))
        return True

    # --- victims ---------------------------------------------------------------------------------------

    @staticmethod
    def marked(job: Job) -> bool:
        return _saving(job)

    async def evict(self, job: Job) -> None:
        """A marked victim: let it go on if its preemptor no longer needs the room; else, once its
        ranks saved a step (or the grace ran out), requeue it and delete its pods."""
        now = self.ctx.clock.time()
        by = job.status.preempted_by or ""
        preemptor = self.ctx.state.jobs.get(parse_key(by)) if by else None
        if preemptor is None or preemptor.deleting or preemptor.finished or (
                preemptor.placement is not None and preemptor.key not in self._holds):
            why = "it is gone" if preemptor is None or preemptor.deleting else "it was placed without this job's room"
            message = f"preemption for {by or 'an unknown job'} cancelled: {why}; the job runs on"
            self.checkpoints.end(job, self.ctx.memories.recall(job))
            if await self.writer.patch(job, transitions.preemption_cancelled(job, message, utc(now))) is not None:
                metrics.PREEMPTIONS.labels(PreemptionOutcome.CANCELLED).inc()
                await self.events.normal(job, PreemptedReason.CANCELLED, message)
            return
        if not self.checkpoints.saved_first(job, self.ctx.settings.placement.preemption_checkpoint_seconds):
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
        if job.placement is None:
            return False
        ranks = sorted(job.placement.ranks, key=lambda r: r.rank)
        kept = [RankSlot(r.rank, r.node, tuple(r.gpus)) for r in ranks if r.rank not in dropping]
        usable = self.ctx.state.snapshot()
        if len(kept) != size or not all(usable.has_node(s.node) for s in kept):
            return False
        models = {s.node: usable.node(s.node) for s in kept}
        message = f"shrunk from {len(ranks)} to {size} replicas for {by} (higher priority){resume}"
        now = utc(self.ctx.clock.time())
        if await self.attempts.record(job, RestartReason.PREEMPTED, message, [(models[s.node], s.gpus) for s in kept],
                                      {"moved_ranks": sum(1 for i, s in enumerate(kept) if s.rank != i)},
                                      conditions=transitions.shrunk_for_preemption(job, message, now),
                                      preemptions=transitions.recent_and_now(job.status.preemptions, now)) is None:
            return True
        metrics.PREEMPTIONS.labels(PreemptionOutcome.SHRUNK).inc()
        await self.events.warning(job, PreemptedReason.SHRUNK, message)
        await self.attempts.replace_pods(job, tuple(p.name for p in self.ctx.state.job_pods(job.key)
                                                    if not p.terminating))
        return True


def _saving(job: Job) -> bool:
    condition = job.condition(ConditionType.PREEMPTED)
    return condition is not None and condition.status == ConditionStatus.TRUE and \
        condition.reason == PreemptedReason.SAVING
