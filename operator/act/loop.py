"""The placement loop, on the leader only and only once the state has listed Nodes, Pods and
TrainingJobs: each pass takes a snapshot, asks `assess` what every job needs next, hands each answer
to the actor that owns it, flushes what the reports add up to, lifts expired quarantines, then runs
the queue pass and publishes metrics. Jobs whose gang waits in the release line are left alone.

The actors are built here, each with one job; the loop itself only dispatches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import assert_never

from railyard.operator.act.actor_context import Context
from railyard.operator.act.adopted_replacement import ReplacedPods
from railyard.operator.act.adoption import Adoption
from railyard.operator.act.attempts import Attempts
from railyard.operator.act.breaker import Breaker
from railyard.operator.act.checkpoints import Checkpoints
from railyard.operator.act.endpoint_slices import EndpointsWriter
from railyard.operator.act.errors import JobErrors
from railyard.operator.act.events import Events
from railyard.operator.act.lifecycle import Lifecycle
from railyard.operator.act.materialiser import Materialiser
from railyard.operator.act.moves import Moves
from railyard.operator.act.observe import Observer
from railyard.operator.act.pods import PodDeleter
from railyard.operator.act.preemptions import Victims
from railyard.operator.act.quarantine import Quarantine
from railyard.operator.act.queue_pass import QueuePass
from railyard.operator.act.recovery import Recovery
from railyard.operator.act.report_flush import ReportFlusher
from railyard.operator.act.resize import Resizer
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import Clock
from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import ConditionType, PlacedReason
from railyard.operator.base.settings import Settings
from railyard.operator.cache.evictions import EvictionBook
from railyard.operator.cache.progress_book import ProgressBook
from railyard.operator.cache.state import ClusterState
from railyard.operator.decide.actions import (
    Action,
    Cleanup,
    Done,
    Evict,
    Finish,
    Invalid,
    MarkRunning,
    PlaceReplaced,
    Queue,
    RecordRelease,
    Resize,
    Restart,
    RestorePlacement,
    Resume,
    Rollback,
    Wait,
)
from railyard.operator.decide.assess import Seen, assess, steady
from railyard.operator.decide.queue import QueuedJob, admit
from railyard.operator.decide.resource_claims import claim_leaving, claim_name
from railyard.operator.kube.client import Fenced
from railyard.operator.kube.protocol import ClusterApi

log = logging.getLogger("railyard.loop")


class PlacementLoop:
    def __init__(self, state: ClusterState, api: ClusterApi, settings: Settings, is_leader: Callable[[], bool],
                 book: ProgressBook | None = None, clock: Clock | None = None,
                 catch_up: Callable[[], Awaitable[None]] | None = None, evictions: EvictionBook | None = None) -> None:
        # One clock for the state's observations and the actors' timing (the state's, unless given).
        self.ctx = Context(state, api, settings, clock or state.clock, book if book is not None else ProgressBook(),
                           evictions if evictions is not None else EvictionBook())
        self.is_leader = is_leader
        # A replica that becomes leader first brings its view past a fresh quorum read (kube/reflector).
        self.catch_up = catch_up
        self._caught_up = False
        self._catching_up: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()
        self._jobs_at_pass: frozenset[Key] = frozenset()  # the jobs the last pass began with
        ctx = self.ctx
        self.writer = StatusWriter(ctx, self.wake)
        self.events = Events(ctx)
        self.pods = PodDeleter(ctx)
        self.breaker = Breaker(ctx, self.writer)
        self.errors = JobErrors(ctx, self.writer, self.events)
        self.writer.on_error = self.errors.report
        self.materialiser = Materialiser(ctx, self.writer, self.events, self.pods)
        self.checkpoints = Checkpoints(ctx)
        self.quarantine = Quarantine(ctx)
        self.attempts = Attempts(ctx, self.writer, self.checkpoints, self.pods, self.materialiser)
        self.lifecycle = Lifecycle(ctx, self.writer, self.events, self.pods, self.materialiser, self.quarantine)
        self.victims = Victims(ctx, self.writer, self.events, self.pods, self.checkpoints, self.attempts)
        self.moves = Moves(ctx, self.writer, self.events, self.checkpoints)
        self.recovery = Recovery(ctx, self.writer, self.events, self.pods, self.attempts, self.quarantine,
                                 self.breaker, self.checkpoints, self.victims, self.moves)
        self.resizer = Resizer(ctx, self.writer, self.events, self.checkpoints, self.attempts, self.recovery)
        self.reports = ReportFlusher(ctx, self.writer, self.events, self.checkpoints)
        self.queue = QueuePass(ctx, self.writer, self.events, self.materialiser, self.errors, self.victims,
                               self.moves)
        self.observer = Observer(ctx)
        self.adoption = Adoption(ctx, self.writer, self.events)
        self.replaced = ReplacedPods(ctx, self.events, self.attempts, self.materialiser, self.quarantine,
                                     self.breaker)
        self.endpoints = EndpointsWriter(ctx)
        self.last_iteration = ctx.clock.monotonic()  # liveness: the loop is turning
        self.iterations = 0

    @property
    def state(self) -> ClusterState:
        return self.ctx.state

    @property
    def book(self) -> ProgressBook:
        return self.ctx.book

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        settings = self.ctx.settings
        passed = float("-inf")
        while True:
            # Ranks report between passes: while any do, their progress is flushed every flush interval (goodput,
            # checkpoints) without a whole pass, which runs on events or every resync interval.
            timeout = settings.placement.resync_seconds
            if self.book.jobs and self._caught_up:
                timeout = min(timeout, max(0.1, settings.reports.flush_seconds))
            woken = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
                woken = True
            if not woken and self.ctx.clock.monotonic() - passed < settings.placement.resync_seconds:
                if self.is_leader():
                    try:
                        await self.reports.flush()
                    except Exception:  # the next pass flushes again
                        log.exception("report flush failed")
                continue
            passed = self.ctx.clock.monotonic()
            # Let a burst of events (200 jobs created at once, a heartbeat wave) land first, so one
            # pass sees them all instead of one pass per event. While gangs are being materialised
            # their pods' events wake the loop constantly: at most one pass a second then (each pass
            # costs a snapshot and a look at every job; turning at every event doubled the operator's
            # CPU in a burst and slowed the API server it shares cores with).
            # A job that arrived since the last pass is not kept waiting for that second: one gang's creates
            # and releases take 1-2 s on a busy API server, and a job arriving meanwhile waited them out
            # before it was even placed. A job leaving is no reason (its pods still hold their GPUs).
            jobs_before = len(self.state.jobs)
            if self.materialiser.busy:
                await self._until_a_job_arrives(1.0)
            else:
                await asyncio.sleep(0.05)
            await self._while_jobs_arrive(jobs_before)
            self._jobs_at_pass = frozenset(self.state.jobs)
            self._wake.clear()
            self.last_iteration = self.ctx.clock.monotonic()
            leader = self.is_leader()
            metrics.IS_LEADER.set(int(leader))
            metrics.STATE_READY.set(int(self.state.ready))
            if not leader:
                self.materialiser.stop()
                if self._catching_up is not None:
                    self._catching_up.cancel()
                    self._catching_up = None
                if self._caught_up:
                    self.term_ended()
                self._caught_up = False
                continue
            if not self._caught_up:
                self.ctx.listening_since = self.ctx.clock.monotonic()
                self._caught_up = self._has_caught_up()
            if not self._caught_up or not self.state.ready:
                continue
            started = time.perf_counter()
            try:
                await self.run_once(wait=False)
            except Fenced:
                log.info("leadership ended during an iteration; stopped writing")
            except Exception:  # the loop must survive anything one iteration meets
                log.exception("placement iteration failed; retrying")
            metrics.ITERATION_SECONDS.observe(time.perf_counter() - started)
            self.iterations += 1
            self.last_iteration = self.ctx.clock.monotonic()

    def _has_caught_up(self) -> bool:
        """Whether this leader's view has passed its fresh quorum read. Begun as soon as it leads, not once every
        kind is listed: the catch-up waits for each kind's list itself (about 4 s of a fresh operator's start at
        100,000 pods overlapped with the pods' stream). A failed one is begun again on the next pass."""
        if self.catch_up is None:
            return True
        if self._catching_up is None:
            self._catching_up = asyncio.ensure_future(self.catch_up())
            self._catching_up.add_done_callback(lambda _: self.wake())
        if not self._catching_up.done():
            return False
        task, self._catching_up = self._catching_up, None
        if task.cancelled() or task.exception() is not None:
            log.error("could not catch up with the API server; not placing yet", exc_info=task.exception())
            return False
        return True

    def term_ended(self) -> None:
        """Leadership ended: what this term learnt is forgotten as a unit — per-job memory, the ranks' reports,
        per-job metric series (a standby exporting stale ones would double every job's series)."""
        self.ctx.memories.forget_all()
        self.ctx.book.forget(set())
        self.reports.goodput.forget(set())

    async def _until_a_job_arrives(self, most: float, step: float = 0.05) -> None:
        """Wait `most` seconds, or less once a job the last pass did not see has arrived."""
        waited = 0.0
        while waited < most and all(key in self._jobs_at_pass for key in self.state.jobs):
            await asyncio.sleep(step)
            waited += step

    async def _while_jobs_arrive(self, seen: int, step: float = 0.05, most: float = 1.0) -> None:
        """While new jobs keep arriving (a burst of creations; `seen`: the count before), wait for a
        pause of `step`, at most `most` seconds: one pass then places them all (the first pass of a
        150-job burst saw 6 of them, and the rest waited a second more for the next pass)."""
        waited = 0.0
        while len(self.state.jobs) != seen and waited < most:
            seen = len(self.state.jobs)
            await asyncio.sleep(step)
            waited += step

    async def run_once(self, wait: bool = True) -> None:
        """One pass over the jobs. Placed gangs are materialised in turn in the background; with
        `wait` (tests, one-shot callers) this returns once they are through."""
        if not self.state.ready:
            return  # never decide on a partial view: a missing pod would look like free GPUs
        await self._pass()
        if wait:
            await self.materialiser.drained()

    def stop(self) -> None:
        """Leadership ended or the process stops: drop the release line (the next leader finishes it)."""
        self.materialiser.stop()

    async def _pass(self) -> None:
        ctx = self.ctx
        now = ctx.clock.time()
        state = ctx.state
        snapshot = state.snapshot()
        ctx.memories.retain(state.jobs.values())
        await self.moves.prune()
        await self.adoption.run()
        waiting: list[QueuedJob] = []
        work: list[Awaitable[None]] = []
        placement = ctx.settings.placement
        # While the breaker holds, nothing is forced: pods on dark nodes may be running still.
        force_after = float("inf") if self.breaker.evaluate().tripped else ctx.settings.faults.force_delete_seconds
        for key, job in list(state.jobs.items()):
            if job.deleting or self.materialiser.pending(key):  # the latter: its gang's turn is pending
                continue
            if self.errors.resting(job):
                continue
            if job.status_error is not None:
                work.append(self.errors.report(job, "status", ValueError(job.status_error)))
                continue
            if job.finished and self._still_done(job):
                continue
            if (names := self.endpoints.due(job)) is not None:
                work.append(names)
            steady_key = (state.job_version(job), state.node_epoch)
            memory = ctx.memories.peek(job)
            if memory is not None and memory.steady == steady_key and not self.moves.active and \
                    not job.past_deadline(now):
                action: Action = Wait()  # a steady gang, nothing changed since it was last assessed Wait
                pods = []
            else:
                adopt = job.spec.adopt if job.spec is not None else None
                pods = state.group_pods(key[0], adopt.group) if adopt is not None else state.job_pods(key)
                try:
                    action = assess(job, pods, snapshot, now, placement.bind_timeout_seconds,
                                    force_after, health=state.health, seen=self._seen(job),
                                    record_release_after=placement.release_record_seconds)
                except Exception as e:  # one job's trouble is that job's: the pass goes on
                    work.append(self.errors.report(job, "assess", e))
                    continue
                if isinstance(action, Wait) and steady(job, pods, state.health):
                    ctx.memories.recall(job).steady = steady_key
            if isinstance(action, Queue):
                entry = admit(job, action.request, state.priority_classes, now)
                if isinstance(entry, Invalid):
                    work.append(self._step(job, entry))
                else:
                    waiting.append(entry)
            elif isinstance(action, Wait | Done):
                if self.errors.failing(job):
                    work.append(self.errors.cleared(job))
                if isinstance(action, Done) and job.finished and not any(p.terminating for p in pods):
                    self.ctx.memories.recall(job).done = state.job_version(job)
            else:
                work.append(self._step(job, action))
        await asyncio.gather(*work)
        await self.breaker.mark()
        await self.reports.flush()
        await self.quarantine.lift_expired(now)
        state.prune_tombstones()
        # A fresh snapshot: restarts, resizes and rollbacks of this pass took or freed nodes since the
        # first (a replacement's node looked free to the queue otherwise: a queued gang could take it too).
        placed = await self.queue.run(waiting, state.snapshot(), now)
        if self.observer.due():
            self.observer.observe(state.snapshot() if placed else snapshot)

    def _still_done(self, job: Job) -> bool:
        """A finished job that was Done (no pod of it Terminating), and neither it nor its pods changed
        since, nor has it an error to clear: Done again (assess reads nothing else for it)."""
        memory = self.ctx.memories.peek(job)
        return memory is not None and not memory.errors and memory.done is not None and \
            memory.done == self.state.job_version(job)

    async def _step(self, job: Job, action: Action) -> None:
        if await self.writer.guard(job.key, self.dispatch(job, action)):
            await self.errors.cleared(job)

    def _seen(self, job: Job) -> Seen:
        """What this operator observed of the job, on its monotonic clock."""
        mono = self.ctx.clock.monotonic()
        memory = self.ctx.memories.recall(job)
        placement = job.placement
        placed = job.condition(ConditionType.PLACED)
        if placement is not None and placed is not None and placed.reason == PlacedReason.RELEASED and \
                (memory.released is None or memory.released[0] != placement.id):
            memory.released = (placement.id, mono)  # released by a predecessor: seen now
        released = memory.released[1] if memory.released is not None and placement is not None and \
            memory.released[0] == placement.id else None
        bound, terminating = self.ctx.state.pod_times(job.key)
        if memory.terminating_seen - terminating.keys():  # one of them is gone: bind progress (assess)
            memory.terminating_left = mono
        memory.terminating_seen = frozenset(terminating)
        leaving, leaving_for = self.moves.leaving(job)
        straggler = memory.straggler[1] if memory.straggler is not None and \
            memory.straggler[0] == job.restart_count else None
        return Seen(mono, released, bound, terminating, self.ctx.evictions.requested(job.namespace, mono),
                    leaving, leaving_for, self._blocked(job) if released is not None else {},
                    memory.terminating_left, straggler)

    def _blocked(self, job: Job) -> dict[str, str]:
        """Unbound, released pods whose ResourceClaim a known device stands in the way of (DRA)."""
        state = self.ctx.state
        placement = job.placement
        if state.devices is None or not state.devices.claims or placement is None or \
                job.is_true(ConditionType.RUNNING):
            return {}  # asked every pass: a running gang (all bound) or a cluster without claims has none
        out = {}
        for rank in placement.ranks:
            pod = state.pods.get((job.namespace, rank.pod or ""))
            if pod is None or pod.node_name or pod.gated or pod.placement_id != placement.id:
                continue
            why = state.devices.blocking((job.namespace, claim_name(pod.name)), rank.node, rank.gpus,
                                         partial(claim_leaving, state.pods, job.key, placement.id))
            if why is not None:
                out[pod.name] = why
        return out

    async def dispatch(self, job: Job, action: Action) -> None:
        """Hand one decision to the actor that owns it."""
        match action:
            case Resume():
                await self.lifecycle.resume(job, action)
            case Restart():
                await self.recovery.restart(job, action)
            case Resize():
                await self.resizer.resize(job, action)
            case Cleanup():
                await self.lifecycle.cleanup(job, action)
            case Invalid():
                await self.lifecycle.invalid(job, action)
            case Rollback():
                await self.lifecycle.rollback(job, action)
            case MarkRunning():
                await self.lifecycle.running(job, action)
            case RecordRelease():
                await self.lifecycle.record_release(job, action)
            case Finish():
                await self.lifecycle.finish(job, action)
            case Evict():
                await self.victims.evict(job)
            case PlaceReplaced():
                await self.replaced.place(job, action)
            case RestorePlacement():
                await self.adoption.restore(job, action)
            case Queue() | Wait() | Done():
                pass
            case _:
                assert_never(action)
