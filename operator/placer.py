"""The placement loop: snapshot -> pure decisions -> API calls. Runs only on the leader, and only
once the state has listed Nodes, Pods and TrainingJobs.

Placing a job is crash-safe by construction:
1. the placement (ranks, nodes, GPUs, a placement id) is written to the job's status first, as a
   conditional write (resourceVersion precondition); from then on those GPUs count as used;
2. the headless Service and all pods are created, gated and pinned (creation is idempotent: a name
   conflict is ours only when the object carries this placement's id or the job's UID);
3. only when every pod exists are all gates removed, then `Placed` becomes reason `Released`.
A leader that starts later finds any job stuck between 1 and 3 (`assess` -> RESUME) and finishes it,
or rolls it back if a node of the placement is gone. Every write response is applied to the state at
once, so the state never lags behind what this replica itself did.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from railyard.operator import conditions as cond
from railyard.operator import metrics
from railyard.operator.apiclient import ApiException, Fenced, KubeApi
from railyard.operator.builders import (
    PodOptions,
    build_event,
    build_pod,
    build_service,
    event_name,
    placement_status,
    pod_labels,
    selector,
)
from railyard.operator.keys import ANNOTATION_PLACEMENT_ID, ANNOTATION_QUARANTINED_UNTIL, QUARANTINE_TAINT
from railyard.operator.progress import ProgressBook
from railyard.operator.queue import QueuedJob, order, reserved_nodes
from railyard.operator.reconcile import (
    INVALID_SPEC,
    NAME_CONFLICT,
    PLACING,
    REFUSED_PREFIX,
    RELEASED,
    Action,
    Kind,
    assess,
)
from railyard.operator.settings import Settings
from railyard.operator.state import ClusterState, Key
from railyard.operator.stragglers import Straggler, StragglerTracker, score
from railyard.operator.turns import TurnQueue
from railyard.operator.views import JobView
from railyard.topology.affinity import has_inter_pod_rules, node_limits
from railyard.topology.api import ElasticPolicy, StragglerPolicy, TrainingJob, TrainingJobSpec
from railyard.topology.elastic import choose_shrink, largest_valid, solve_growth, valid_size
from railyard.topology.faults import NodeLoss
from railyard.topology.model import GpuNode, Snapshot
from railyard.topology.ranks import pipeline_stage
from railyard.topology.replace import RankSlot, Replacement, solve_replacement
from railyard.topology.request import GangRequest
from railyard.topology.solver import Decision, Placement, solve
from railyard.topology.timestamps import epoch, iso

log = logging.getLogger("railyard.placer")


def stable_key(message: str) -> str:
    """The binding constraint of an Unschedulable message without its live counts and without the
    tally of excluded nodes (context, which churns while nodes join or heartbeats lag): the
    condition and its Event change when the constraint changes, not every time a count moves."""
    return re.sub(r"\d+", "#", message.split("; excluded nodes:")[0])


# Why a job can be waiting for a placement (Placed=False reasons, plus "New": not yet decided).
WAIT_REASONS = ("New", "Unschedulable", "Reserving", "InvalidSpec", "NameConflict", "BindTimeout", "NodeLost",
                "StalePods")


class CreateRefused(Exception):
    """The API server refused an object the placement needs; `reason` says how the job is marked."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class _Failure:
    """Why a queued job did not fit last time, and what capacity it saw then."""

    freed: int
    generation: int | None
    at: float


class Placer:
    def __init__(self, state: ClusterState, api: KubeApi, settings: Settings, is_leader: Callable[[], bool],
                 book: ProgressBook | None = None) -> None:
        self.state = state
        self.api = api
        self.settings = settings
        self.is_leader = is_leader
        self.book = book if book is not None else ProgressBook()
        reports = settings.reports
        self.pod_options = PodOptions(settings.placement.master_port, reports.url or None, reports.audience)
        self._flushed: dict[Key, float] = {}  # job -> when report-derived status was last written
        self._trackers: dict[tuple[Key, int], StragglerTracker] = {}  # (job, generation) -> slow nodes
        self._evicting: dict[Key, str] = {}  # job -> the straggler to evict once its checkpoint is in
        # job -> (step every rank was asked to save, deadline): one request serves an eviction and a resize
        self._checkpoint_requests: dict[Key, tuple[int, float]] = {}
        self._grow_attempts: dict[Key, tuple[int, float]] = {}  # job -> (freed epoch, when) of its last failed grow
        self._wake = asyncio.Event()
        self._limit = asyncio.Semaphore(settings.api.workers)
        self._turns = TurnQueue(2 * settings.api.workers)  # two pods in flight per request worker
        self._materialising: dict[Key, asyncio.Task[None]] = {}  # gangs waiting for or in their turn
        self._failures: dict[Key, _Failure] = {}
        self._events: dict[str, tuple[int, str]] = {}  # event name -> (count, firstTimestamp)
        self._job_series = metrics.JobSeries(settings.metrics.job_limit)
        self._losses_seen: dict[Key, float] = {}  # job -> when its first unhandled node loss was seen
        self.last_iteration = time.monotonic()  # liveness: the loop is turning
        self.iterations = 0

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.placement.resync_seconds)
            # Let a burst of events (200 jobs created at once, a heartbeat wave) land first, so one
            # iteration sees them all instead of one iteration per event. While gangs are being
            # materialised their pods' events wake the loop constantly: at most one pass a second
            # then (each pass costs a snapshot and a look at every job; turning at every event
            # doubled the operator's CPU in a burst and slowed the API server it shares cores with).
            await asyncio.sleep(1.0 if self._materialising else 0.05)
            self._wake.clear()
            self.last_iteration = time.monotonic()
            leader = self.is_leader()
            metrics.IS_LEADER.set(int(leader))
            metrics.STATE_READY.set(int(self.state.ready))
            if not leader:
                self.stop_materialising()
            if not leader or not self.state.ready:
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
            self.last_iteration = time.monotonic()

    # --- one iteration ------------------------------------------------------------------------------

    async def run_once(self, wait: bool = True) -> None:
        """One pass over the jobs. Placed gangs are materialised in turn in the background; with
        `wait` (tests, one-shot callers) this returns once they are through."""
        if not self.state.ready:
            return  # never decide on a partial view: a missing pod would look like free GPUs
        await self._run_once()
        if wait:
            await self.materialised()

    async def _run_once(self) -> None:
        now = time.time()
        snapshot = self.state.snapshot()
        queued: list[QueuedJob] = []
        work: list[Awaitable[None]] = []
        placement = self.settings.placement
        for key, body in list(self.state.jobs.items()):
            job = JobView(body)
            if job.deleting or key in self._materialising:  # the latter: its gang's turn is pending
                continue
            try:
                action = assess(body, self.state.job_pods(key), snapshot, now, placement.bind_timeout_seconds,
                                placement.force_delete_seconds, health=self.state.health)
            except Exception:
                log.exception("job %s/%s: cannot assess; skipping it this round", *key)
                continue
            match action.kind:
                case Kind.QUEUE:
                    assert action.request is not None
                    queued.append(self._queued(key, job, action.request, now))
                case Kind.WAIT | Kind.DONE:
                    pass
                case _:
                    work.append(self._guard(key, self._act(key, job, action)))
        await asyncio.gather(*work)
        await self._record_progress()
        await self._lift_expired_quarantines(now)
        self.state.prune_tombstones()
        placed = await self._place_queue(queued, snapshot, now)
        self._observe(self.state.snapshot() if placed else snapshot)

    async def _guard(self, key: Key, step: Awaitable[Any]) -> None:
        try:
            await step
        except Fenced:
            raise
        except ApiException as e:
            if e.status == 409:  # someone wrote since we read: re-read, the next iteration re-decides
                log.info("job %s/%s: conflict (%s); re-reading", *key, e.reason)
                fresh = await self.api.get_job(*key)
                if fresh is not None:
                    self.state.apply_job("MODIFIED", fresh)
                self.wake()
                return
            log.warning("job %s/%s: step failed (%s %s); will retry", *key, e.status, e.reason)
        except Exception:
            log.exception("job %s/%s: step failed; will retry", *key)

    def _queued(self, key: Key, job: JobView, request: GangRequest, now: float) -> QueuedJob:
        avoid = frozenset(a["node"] for a in job.status.get("avoidNodes") or [] if epoch(a.get("until"), 0) > now)
        return QueuedJob(key, job.priority, epoch(job.queued_since, now), request, avoid)

    def _worth_solving(self, job: QueuedJob, now: float) -> bool:
        """An unschedulable job is solved again only when capacity was freed since it last failed,
        its spec changed, or the retry period passed (the loop stays cheap with 200 waiting jobs)."""
        failure = self._failures.get(job.key)
        body = self.state.jobs.get(job.key)
        if failure is None or body is None:
            return True
        return (failure.freed != self.state.usage.freed or failure.generation != JobView(body).generation
                or now - failure.at > self.settings.placement.retry_seconds)

    async def _place_queue(self, queued: list[QueuedJob], snapshot: Snapshot, now: float) -> int:
        current = snapshot
        reserved: frozenset[str] = frozenset()
        holder: Key | None = None
        placed: list[tuple[JobView, Decision]] = []
        unplaced: list[tuple[JobView, Decision, bool]] = []
        ordered = order(queued)
        self._failures = {k: v for k, v in self._failures.items() if k in self.state.jobs}
        # A reservation, once taken, holds across iterations: its holder goes first and its domain is
        # fenced off before anything else is tried (timestamps have one-second resolution, so queue
        # order alone could let a job created in the same second slip in front of it).
        for job in ordered:
            recorded = self.state.jobs.get(job.key)
            if recorded is not None and JobView(recorded).condition(cond.PLACED).get("reason") == "Reserving":
                holder, reserved = job.key, reserved_nodes(job, current)
                ordered = [job, *(j for j in ordered if j.key != job.key)]
                break
        for job in ordered:
            starving = now - job.queued_since > self.settings.placement.starvation_seconds
            if not self._worth_solving(job, now) and not (starving and holder is None):
                continue
            view = current.without_nodes(reserved) if holder is not None and job.key != holder else current
            view = view.without_nodes(job.avoid)
            limits = None
            if has_inter_pod_rules(job.request.pod_spec):  # rare: costs a pass over every pod
                limits = node_limits(job.request.pod_spec, job.key[0], pod_labels(self.state.jobs[job.key]),
                                     self.state.pod_infos(), view.nodes)
            started = time.perf_counter()
            decision = solve(view, job.request, limits)
            metrics.SOLVE_SECONDS.observe(time.perf_counter() - started)
            await asyncio.sleep(0)  # yield between solves: watch events and probes keep flowing
            found = self.state.jobs.get(job.key)
            if found is None:
                continue
            body = JobView(found)
            if decision.placement is not None:
                current = current.allocate(decision.placement.allocations, job.request.resources)
                placed.append((body, decision))
                self._failures.pop(job.key, None)
                if job.key == holder:  # the reservation served its purpose
                    holder, reserved = None, frozenset()
                continue
            self._failures[job.key] = _Failure(self.state.usage.freed, body.generation, now)
            if job.avoid:
                decision = Decision(decision.request, None, f"{decision.reason}; avoiding nodes "
                                    f"{', '.join(sorted(job.avoid))} after a bind failure")
            if starving and holder is None:
                holder, reserved = job.key, reserved_nodes(job, current)
            unplaced.append((body, decision, job.key == holder))
        await asyncio.gather(*(self._guard(b.key, self._mark_unplaced(b, d, r)) for b, d, r in unplaced))
        # Record every placement now (the next iteration's snapshot holds them), then create and
        # release the gangs in turn while the loop goes on placing what arrives meanwhile. Their
        # capacity is taken already, so the order only decides who binds first: smaller gangs of
        # this pass first (more jobs running sooner), behind every gang of earlier passes.
        await asyncio.gather(*(self._guard(b.key, self._reserve(b, d)) for b, d in placed))
        for body, size in sorted(((b, len(d.placement.replicas) if d.placement else 0) for b, d in placed),
                                 key=lambda placed_gang: placed_gang[1]):
            recorded = self.state.jobs.get(body.key)
            if recorded is not None and JobView(recorded).placement.get("id"):
                self._start_materialising(JobView(recorded), size)
        metrics.QUEUE_LENGTH.set(len(queued) - len(placed))
        return len(placed)

    def _current(self, job: JobView) -> JobView:
        """The freshest body the state holds (a write earlier in this step may have replaced it)."""
        body = self.state.jobs.get(job.key)
        return JobView(body) if body is not None else job

    async def _patch_status(self, job: JobView, patch: dict[str, Any]) -> dict[str, Any] | None:
        """A conditional status write (409 if the job changed since we read it); the response is
        applied to the state at once."""
        patch.setdefault("observedGeneration", job.generation)
        updated = await self.api.patch_job_status(job.namespace, job.name, patch, job.resource_version)
        if updated is not None:
            self.state.apply_job("MODIFIED", updated)
        return updated

    # --- worker reports -----------------------------------------------------------------------------

    def committed_checkpoint(self, job: JobView) -> dict[str, Any] | None:
        """The newest checkpoint every rank saved: the recorded one, or a newer one from the reports."""
        recorded = job.status.get("lastCheckpoint")
        generation = job.restart_count
        found = self.book.committed(job.key, generation, len(job.placement.get("ranks") or []))
        if found is None or (recorded and int(recorded.get("step", -1)) >= found[0]):
            return recorded
        return {"step": found[0], "path": found[1], "time": cond.now_iso(), "generation": generation}

    async def _record_progress(self) -> None:
        """Write what the reports add up to — a newly committed checkpoint, step time, stragglers — at
        most once per job per flush period; evict a straggler when the job's policy says so."""
        self.book.forget(set(self.state.jobs))
        self._trackers = {k: v for k, v in self._trackers.items() if k[0] in self.book.jobs}
        mono, now = time.monotonic(), time.time()
        writes = []
        persistent = 0
        for key in list(self.book.jobs):
            body = self.state.jobs.get(key)
            if body is None or mono - self._flushed.get(key, float("-inf")) < self.settings.reports.flush_seconds:
                continue
            job = JobView(body)
            if job.deleting or cond.state_of(job.conditions) in ("Succeeded", "Failed"):
                continue
            patch: dict[str, Any] = {}
            committed = self.committed_checkpoint(job)
            if committed is not None and committed is not job.status.get("lastCheckpoint"):
                patch["lastCheckpoint"] = committed
            eviction = None
            policy = job.straggler_policy
            if policy is not None and cond.is_true(job.conditions, cond.RUNNING):
                fields, eviction, slow = self._judge_stragglers(job, policy, now)
                patch.update(fields)
                persistent += len(slow)
                if "conditions" in fields and slow:  # Straggling just became (or changed) Slow
                    generation = job.restart_count
                    writes += [self._event(job, "Warning", "StragglerDetected", f"{f.node}: score {f.score:.2f}",
                                           key=f"{generation}/{f.node}") for f in slow]
            if eviction is not None:
                writes.append(self._guard(key, self._evict(job, eviction, now)))
            elif patch:
                self._flushed[key] = mono
                writes.append(self._guard(key, self._patch_status(job, patch)))
        metrics.STRAGGLERS.set(persistent)
        await asyncio.gather(*writes)

    def _judge_stragglers(self, job: JobView, policy: StragglerPolicy, now: float
                          ) -> tuple[dict[str, Any], Action | None, list[Straggler]]:
        """Status fields that changed, an eviction to carry out (or None), and the persistent stragglers."""
        progress = self.book.jobs[job.key]
        generation = job.restart_count
        if progress.generation != generation or now - progress.started < policy.window.seconds:
            return {}, None, []
        ranks = job.placement.get("ranks") or []
        rank_nodes = {r["rank"]: r["node"] for r in ranks}
        models = {n: self.state.nodes.get(n) or self.state.last_model.get(n) for n in set(rank_nodes.values())}
        tors = {n: m.tor for n, m in models.items() if m is not None}
        spec = TrainingJob.model_validate(job.body).spec
        stages = {r: pipeline_stage(r, len(ranks), spec.gpus_per_replica, spec.parallelism) for r in rank_nodes}
        scores = score(progress.samples(), rank_nodes, tors, policy, progress.first_step or 0, stages)
        if scores is None:
            return {}, None, []
        tracker = self._trackers.get((job.key, generation))
        if tracker is None:  # seeded from status: an operator restart does not reset how long a node was slow
            recorded = {s.get("node"): epoch(s.get("since"), now) for s in job.status.get("stragglers") or []}
            tracker = self._trackers[(job.key, generation)] = StragglerTracker(below_since=recorded)
        flagged = tracker.observe(scores, now, policy)
        slow = [f for f in flagged if f.persistent]
        action_of = {f.node: "Reported" for f in flagged}
        eviction = None
        if policy.action == "Evict":
            eviction = self._eviction(job, policy, flagged, scores.step_p50, tracker, now, action_of)
        fields: dict[str, Any] = {}
        # Written when they change materially (or once a minute): never a status write per report.
        recorded_step = job.status.get("stepTime") or {}
        if scores.step_p50 is not None and (
                abs(scores.step_p50 - float(recorded_step.get("p50Seconds") or 0)) > 0.05 * scores.step_p50
                or now - epoch(recorded_step.get("updatedAt"), 0) > 60):
            fields["stepTime"] = {"p50Seconds": round(scores.step_p50, 4),
                                  "p90Seconds": round(scores.step_p90 or scores.step_p50, 4),
                                  "samples": scores.samples, "updatedAt": iso(now)}
        stragglers = [{"node": f.node, "ranks": list(f.ranks), "score": round(f.score, 2), "since": iso(f.since),
                       "action": action_of[f.node]} for f in flagged]
        before = [{k: v for k, v in x.items() if k != "score"} for x in job.status.get("stragglers") or []]
        if [{k: v for k, v in x.items() if k != "score"} for x in stragglers] != before:
            fields["stragglers"] = stragglers
        if slow:
            reason, message = "Slow", (f"slow for {policy.min_duration_seconds}s or more: "
                                       f"{', '.join(f.node for f in slow)} (scores in status.stragglers)")
        elif scores.network:
            reason, message = "Network", (f"every node of the job in TOR {', '.join(scores.network)} is slow: a "
                                          "shared cause (network, power, cooling); no node is evicted")
        else:
            reason, message = "", ""
        current = job.condition(cond.STRAGGLING)
        if reason and not cond.unchanged(job.conditions, cond.STRAGGLING, reason, message):
            fields["conditions"] = cond.set_condition(job.conditions, cond.STRAGGLING, "True", reason, message,
                                                      job.generation)
        elif not reason and current.get("status") == "True":
            fields["conditions"] = cond.set_condition(job.conditions, cond.STRAGGLING, "False", "NoStragglers",
                                                      "every node within the threshold", job.generation)
        return fields, eviction, slow

    def _eviction(self, job: JobView, policy: StragglerPolicy, flagged: list[Straggler], step_seconds: float | None,
                  tracker: StragglerTracker, now: float, action_of: dict[str, str]) -> Action | None:
        """Evict the slowest persistent straggler; with checkpointBeforeEvict, after the checkpoint
        every rank was asked for (or its timeout)."""
        node = self._evicting.get(job.key)
        if node is None:
            slow = [f for f in flagged if f.persistent]
            if not slow or not tracker.may_evict(now, policy):
                return None
            worst = min(slow, key=lambda f: f.score)
            if not policy.checkpoint_before_evict:
                return _straggler_restart(job, worst)
            node = self._evicting[job.key] = worst.node
        action_of[node] = "CheckpointRequested"
        if not self._checkpoint_ready(job, policy.checkpoint_timeout_seconds, step_seconds, now):
            return None
        flag = next((f for f in flagged if f.node == node), None)
        if flag is None:  # it recovered while the checkpoint was taken: nothing to evict
            self._evicting.pop(job.key, None)
            self._end_checkpoint_request(job.key)
            return None
        return _straggler_restart(job, flag)

    def _checkpoint_ready(self, job: JobView, timeout: float, step_seconds: float | None, now: float) -> bool:
        """Ask every rank to save one step, far enough ahead that all of them hear of it before they
        reach it (the request rides on the report answers; a pending request is reused). True once
        every rank of the generation reported that step saved, or after `timeout`."""
        progress = self.book.jobs[job.key]
        pending = self._checkpoint_requests.get(job.key)
        if pending is None:
            margin = math.ceil(3 * self.settings.reports.worker_interval_seconds / max(step_seconds or 1.0, 0.001))
            target = progress.max_step + margin + 2
            self._checkpoint_requests[job.key] = (target, now + timeout)
            progress.directives["checkpoint"] = {"step": target}
            return False
        target, deadline = pending
        saved = self.book.committed(job.key, job.restart_count, len(job.placement.get("ranks") or []))
        return (saved is not None and saved[0] >= target) or now >= deadline

    def _end_checkpoint_request(self, key: Key) -> None:
        self._checkpoint_requests.pop(key, None)
        progress = self.book.jobs.get(key)
        if progress is not None:
            progress.directives.pop("checkpoint", None)

    async def _evict(self, job: JobView, action: Action, now: float) -> None:
        """Restart the gang without the straggler (the fault path: replacement next to it, quarantine)."""
        tracker = self._trackers.get((job.key, job.restart_count))
        if tracker is not None:
            tracker.evicted(now)
        self._evicting.pop(job.key, None)
        self._end_checkpoint_request(job.key)
        metrics.STRAGGLER_EVICTIONS.inc()
        await self._restart(job, action)

    # --- placing ------------------------------------------------------------------------------------

    async def _reserve(self, job: JobView, decision: Decision) -> None:
        """Record the placement in the job's status: from then on its GPUs are taken (in this
        replica's state at once, and for a successor that lists the jobs)."""
        placement = decision.placement
        assert placement is not None
        placement_id = uuid.uuid4().hex[:10]
        message = (f"{len(placement.replicas)} replicas on {placement.tors} TORs, {placement.leaves} leaves, "
                   f"{placement.spines} spines; {'rail-aligned' if placement.rail_aligned else 'not rail-aligned'}")
        conditions = cond.set_condition(job.conditions, cond.PLACED, "True", PLACING, message, job.generation)
        patch = {
            "placement": {**placement_status(placement, job.name, placement_id,
                                             job.restart_count),
                          "desiredReplicas": job.desired_replicas},
            "replicas": len(placement.replicas),
            "selector": selector(job.name),
            "queuedSince": job.queued_since,
            "conditions": self._below_desired(job, conditions, len(placement.replicas)),
        }
        await self._patch_status(job, patch)

    def _start_materialising(self, job: JobView, size: int) -> None:
        placement_id = job.placement.get("id")

        async def step() -> None:
            current = self.state.jobs.get(job.key)
            # Deleted, or placed anew while it waited: nothing of this placement to create.
            if current is None or JobView(current).deleting or JobView(current).placement.get("id") != placement_id:
                return
            await self._guard(job.key, self._materialise(JobView(current), None))

        async def in_turn() -> None:
            try:
                await self._turns.run(size, step)
            except Fenced:
                log.info("job %s/%s: leadership ended before its gang was released", *job.key)
            finally:
                self._materialising.pop(job.key, None)
                self.wake()  # its next step (or a retry) belongs to the loop again

        self._materialising[job.key] = asyncio.get_running_loop().create_task(in_turn())

    async def materialised(self) -> None:
        """Until every gang waiting for or in its turn is through."""
        while self._materialising:
            await asyncio.gather(*list(self._materialising.values()), return_exceptions=True)

    def stop_materialising(self) -> None:
        """Leadership ended: the gangs not yet through are the next leader's (their placements are
        recorded; it creates what is missing)."""
        for task in self._materialising.values():
            task.cancel()

    async def _materialise(self, job: JobView, only: tuple[str, ...] | None) -> None:
        """Create the Service and the (missing) pods, then release the whole gang at once."""
        placement = job.placement
        ranks = placement["ranks"]
        try:
            await self._create_owned("services", build_service(job.body), placement["id"])
            pods = [
                build_pod(job.body, r["rank"], r["node"], r["gpus"], len(ranks), placement.get("railAligned", False),
                          placement["id"], self.pod_options)
                for r in ranks if only is None or r["pod"] in only
            ]
            await asyncio.gather(*(self._limited(self._create_owned("pods", p, placement["id"])) for p in pods))
        except CreateRefused as refused:
            await self._refuse(job, refused)
            return
        self._crash_point("pods-created")
        gate = len(((job.body["spec"].get("template") or {}).get("spec") or {}).get("schedulingGates") or [])
        released = await asyncio.gather(*(self._limited(self.api.release_pod(job.namespace, r["pod"], gate))
                                          for r in ranks))
        for pod in released:
            if pod:
                self.state.apply_pod("MODIFIED", pod)
        self._crash_point("released")
        current = self._current(job)
        conditions = cond.set_condition(current.conditions, cond.PLACED, "True", RELEASED,
                                        job.condition(cond.PLACED).get("message", ""), job.generation)
        release: dict[str, Any] = {}
        if cond.is_true(conditions, cond.RESTARTING):
            generation = current.restart_count
            conditions = cond.set_condition(conditions, cond.RESTARTING, "False", RELEASED,
                                            f"generation {generation} released", job.generation)
            release["lastRestart"] = {"releasedAt": cond.now_iso()}
        if cond.is_true(conditions, cond.DEGRADED):
            conditions = cond.set_condition(conditions, cond.DEGRADED, "False", "Recovered",
                                            "every rank has a node again", job.generation)
        if await self._patch_status(current, {**release, "conditions": conditions}) is None:
            return
        created = epoch(job.created, time.time())
        metrics.RELEASE_SECONDS.observe(max(0.0, time.time() - created))
        metrics.PLACEMENTS.inc()
        metrics.TORS_SPANNED.observe(placement.get("tors", 0))
        await self._event(job, "Normal", "Released", f"gang of {len(ranks)} released: "
                          f"{placement.get('tors')} TORs, rail-aligned={placement.get('railAligned')}",
                          key=placement["id"])

    async def _create_owned(self, plural: str, body: dict[str, Any], placement_id: str) -> None:
        """Create, or accept an existing object only if it is ours (this placement's id, or owned by
        this job). Someone else's object, or a body the API server refuses, stops the placement."""
        try:
            created, stored = await self.api.create(plural, body)
        except ApiException as e:
            if e.status in (400, 403, 422):
                raise CreateRefused(INVALID_SPEC, f"{REFUSED_PREFIX} {plural[:-1]} "
                                    f"{body['metadata']['name']}: {_api_message(e)}") from None
            raise
        if stored is None:
            return
        if not created:
            meta = stored.get("metadata") or {}
            owner_uid = body["metadata"]["ownerReferences"][0]["uid"]
            ours = (meta.get("annotations") or {}).get(ANNOTATION_PLACEMENT_ID) == placement_id or \
                any(o.get("uid") == owner_uid for o in meta.get("ownerReferences") or [])
            if not ours:
                raise CreateRefused(NAME_CONFLICT, f"{plural[:-1]} {meta.get('namespace')}/{meta.get('name')} "
                                    "already exists and does not belong to this job; rename the job or delete it")
        if plural == "pods":
            self.state.apply_pod("ADDED", stored)

    async def _refuse(self, job: JobView, refused: CreateRefused) -> None:
        """Undo the placement (its GPUs go back) and say why; the job holds nothing meanwhile."""
        metrics.PLACEMENT_FAILURES.labels(refused.reason).inc()
        placement_id = job.placement.get("id", "")
        await self._delete_pods(job.key, [p.name for p in self.state.pods_of_placement(job.key, placement_id)], ())
        current = self._current(job)
        conditions = cond.set_condition(current.conditions, cond.PLACED, "False", refused.reason, refused.message,
                                        job.generation)
        await self._patch_status(current, {"placement": None, "replicas": 0, "conditions": conditions})
        await self._event(job, "Warning", refused.reason, refused.message)

    async def _limited(self, step: Awaitable[Any]) -> Any:
        async with self._limit:
            return await step

    def _crash_point(self, name: str) -> None:
        if self.settings.crash_after == name:
            log.warning("RAILYARD_TEST_CRASH_AFTER=%s: exiting now (fault injection)", name)
            os._exit(17)

    # --- other actions --------------------------------------------------------------------------------

    async def _mark_unplaced(self, job: JobView, decision: Decision, reserving: bool) -> None:
        reason = "Reserving" if reserving else "Unschedulable"
        message = decision.reason or "no placement"
        if reserving:
            message += "; waited past the starvation limit: its domain is reserved"
        previous = job.condition(cond.PLACED)
        if previous.get("reason") == reason and stable_key(previous.get("message", "")) == stable_key(message):
            return  # same binding constraint, only counts moved: no write, no Event
        metrics.PLACEMENT_FAILURES.labels(reason).inc()
        patch = {
            "queuedSince": job.queued_since,
            "conditions": cond.set_condition(job.conditions, cond.PLACED, "False", reason, message, job.generation),
        }
        if await self._patch_status(job, patch) is not None:
            await self._event(job, "Warning", reason, message, key=stable_key(message))

    async def _delete_pods(self, key: Key, names: list[str] | tuple[str, ...], force: tuple[str, ...]) -> None:
        ns = key[0]
        uids = {p.name: p.uid for p in self.state.job_pods(key)}
        await asyncio.gather(*(self._limited(self.api.delete_pod(ns, n, uids.get(n))) for n in names if n not in force),
                             *(self._limited(self.api.delete_pod(ns, n, uids.get(n), grace_seconds=0))
                               for n in force))

    async def _act(self, key: Key, job: JobView, action: Action) -> None:
        status = job.status
        conditions = job.conditions
        generation = job.generation
        patch: dict[str, Any]
        match action.kind:
            case Kind.RESUME:
                if action.stale or action.force:  # an older generation first: it holds the GPUs
                    await self._delete_pods(key, action.stale, action.force)
                await self._materialise(job, action.pods)
                return
            case Kind.RESTART:
                # Losses close together (a switch, a rack's power) make one restart: act only once the
                # first one has been seen for the debounce window. Nodes that stopped at the same moment
                # turn NotReady up to a lease renewal + a monitor period apart, so heartbeat losses wait
                # longer. A process failure waits its backoff.
                seen = self._losses_seen.setdefault(key, time.monotonic())
                placement = self.settings.placement
                if action.counted:
                    delay = job.fault_policy.backoff(int(status.get("processRestarts") or 0))
                elif action.losses and all(loss.reason == "NodeNotReady" for loss in action.losses):
                    delay = placement.not_ready_debounce_seconds
                else:
                    delay = placement.loss_debounce_seconds
                wait = delay - (time.monotonic() - seen)
                if wait > 0:
                    asyncio.get_running_loop().call_later(wait, self.wake)
                    return
                self._losses_seen.pop(key, None)
                await self._restart(job, action)
                return
            case Kind.RESIZE:
                await self._resize(job, action)
                return
            case Kind.CLEANUP:
                await self._delete_pods(key, action.pods, action.force)
                return
            case Kind.INVALID:
                if cond.unchanged(conditions, cond.PLACED, action.reason, action.message):
                    return
                patch = {"conditions": cond.set_condition(conditions, cond.PLACED, "False", action.reason,
                                                          action.message, generation)}
                await self._event(job, "Warning", action.reason, action.message)
            case Kind.ROLLBACK:
                metrics.PLACEMENT_FAILURES.labels(action.reason).inc()
                await self._delete_pods(key, action.pods, action.force)
                patch = {"placement": None, "replicas": 0,
                         "conditions": cond.set_condition(conditions, cond.PLACED, "False", action.reason,
                                                          action.message, generation)}
                if action.avoid:
                    stamp = iso(time.time() + self.settings.placement.avoid_seconds)
                    kept = [a for a in status.get("avoidNodes") or [] if a.get("node") not in action.avoid]
                    patch["avoidNodes"] = kept + [{"node": n, "reason": action.reason, "until": stamp}
                                                  for n in action.avoid]
                await self._event(job, "Warning", action.reason, action.message)
            case Kind.RUNNING:
                patch = {"startTime": status.get("startTime") or cond.now_iso(),
                         "conditions": cond.set_condition(conditions, cond.RUNNING, "True", action.reason,
                                                          action.message, generation)}
            case Kind.SUCCEED | Kind.FAIL:
                type_ = cond.SUCCEEDED if action.kind is Kind.SUCCEED else cond.FAILED
                updated = cond.set_condition(conditions, type_, "True", action.reason, action.message, generation)
                if cond.get(updated, cond.RUNNING):
                    updated = cond.set_condition(updated, cond.RUNNING, "False", action.reason, action.message,
                                                 generation)
                patch = {"completionTime": cond.now_iso(), "conditions": updated}
                await self._event(job, "Normal" if action.kind is Kind.SUCCEED else "Warning", action.reason,
                                  action.message)
            case _:
                return
        await self._patch_status(job, patch)

    async def _restart(self, job: JobView, action: Action) -> None:
        """Lost nodes under a released gang: every healthy rank keeps its node and GPUs, the lost ranks
        get replacements next to where they were, and the whole gang restarts as a new generation
        (NCCL communicators must be rebuilt). Recorded in status before any pod is touched."""
        assert action.request is not None
        ranks = sorted(job.placement["ranks"], key=lambda r: r["rank"])
        snapshot = self.state.snapshot()
        # A node that became unusable since the decision (watch events land while we await) is lost too.
        late = sorted({r["node"] for r in ranks if not snapshot.has_node(r["node"])}
                      - {loss.node for loss in action.losses})
        excluded = self.state.excluded
        losses = action.losses + tuple(
            NodeLoss(n, "NodeNotUsable", f"node {n}: {excluded[n].reason if n in excluded else 'gone'}", None)
            for n in late)
        lost_names = {loss.node for loss in losses}
        keep = [RankSlot(r["rank"], r["node"], tuple(r["gpus"])) for r in ranks if r["node"] not in lost_names]
        lost = [RankSlot(r["rank"], r["node"], tuple(r["gpus"])) for r in ranks if r["node"] in lost_names]
        models = {n: self.state.last_model[n] for n in lost_names if n in self.state.last_model}
        snapshot = snapshot.without_nodes(frozenset(lost_names))
        started = time.perf_counter()
        decision = solve_replacement(snapshot, action.request, keep, lost, models)
        metrics.REPLACEMENT_SECONDS.observe(time.perf_counter() - started)
        now = cond.now_iso()
        generation = job.restart_count + 1
        known = {u.get("name") for u in job.status.get("unhealthyNodes") or []}
        unhealthy = [u for u in job.status.get("unhealthyNodes") or [] if u.get("name") not in lost_names]
        unhealthy += [{"name": loss.node, "reason": loss.reason, "message": loss.message[:1024],
                       "since": loss.since or now} for loss in losses]
        on_lost = tuple(p.name for p in self.state.job_pods(job.key) if (p.node_name or "") in lost_names)
        everyone = tuple(p.name for p in self.state.job_pods(job.key) if not p.terminating)
        for loss in losses:
            if loss.node not in known:
                await self._event(job, "Warning", "NodeLost", loss.message, key=f"{generation}/{loss.node}")
        if not decision.found:
            await self._no_replacement(job, action, sorted(lost_names), len(lost), decision.reason or "", unhealthy,
                                       everyone, on_lost)
            await self._quarantine(losses)
            return
        metrics.RESTARTS.labels(action.reason).inc()
        new_home = {r.rank: r for r in decision.replacements}
        replicas = []
        for r in ranks:
            moved = new_home.get(r["rank"])
            node, gpus = (moved.new, moved.gpus) if moved else (r["node"], tuple(r["gpus"]))
            replicas.append((snapshot.node(node), gpus))
        replacements = [{"rank": r.rank, "lost": r.lost, "new": r.new, "sameTor": r.same_tor}
                        for r in decision.replacements]
        if losses:
            message = (f"restart {generation}: {len(lost)} ranks on {len(lost_names)} lost nodes replaced "
                       f"({sum(r.same_tor for r in decision.replacements)} in the same TOR); every rank restarts")
        else:
            message = f"restart {generation} on the same nodes: {action.message}"
        record = {"lostNodes": sorted(lost_names), "replacements": replacements, "movedRanks": 0,
                  "detectedAt": min((u["since"] for u in unhealthy if u["name"] in lost_names), default=now)}
        if not await self._new_generation(job, action.reason, message, replicas, record, {"unhealthyNodes": unhealthy},
                                          counted=action.counted):
            return
        if replacements:
            await self._event(job, "Normal", "ReplacementChosen", "; ".join(
                f"rank {r['rank']}: {r['lost']} -> {r['new']}{' (same TOR)' if r['sameTor'] else ''}"
                for r in replacements), key=str(generation))
        await self._event(job, "Normal", "RestartIssued", message, key=str(generation))
        straggling = job.straggler_policy if action.reason == "Straggler" else None
        await self._quarantine(losses, straggling.quarantine_seconds if straggling else 0)
        # The old generation goes; pods on lost nodes at once (no kubelet will confirm their end).
        await self._delete_pods(job.key, everyone, on_lost)
        await self._materialise(self._current(job), None)

    async def _new_generation(self, job: JobView, reason: str, message: str, replicas: list[tuple[GpuNode,
                              tuple[int, ...]]], record: dict[str, Any], extra: dict[str, Any],
                              counted: bool = False) -> bool:
        """Record a new generation of the gang in status (write-ahead: an operator killed after this
        finishes it, see assess -> RESUME): its placement in rank order, the restart record with the
        resume point, the conditions. False when the write did not happen (job gone)."""
        generation = job.restart_count + 1
        now = cond.now_iso()
        placement = Placement.from_replicas(replicas, self.state.scheme.levels)
        conditions = cond.set_condition(job.conditions, cond.PLACED, "True", PLACING, message, job.generation)
        if cond.get(conditions, cond.RUNNING):
            conditions = cond.set_condition(conditions, cond.RUNNING, "False", "Restarting", message, job.generation)
        conditions = cond.set_condition(conditions, cond.RESTARTING, "True", reason, message, job.generation)
        if cond.is_true(conditions, cond.STRAGGLING):  # a new generation is measured afresh
            conditions = cond.set_condition(conditions, cond.STRAGGLING, "False", "Restarted", message,
                                            job.generation)
        conditions = self._below_desired(job, conditions, len(replicas))
        checkpoint = self.committed_checkpoint(job)
        patch = {
            "placement": {**placement_status(placement, job.name, uuid.uuid4().hex[:10], generation),
                          "desiredReplicas": job.desired_replicas or len(replicas)},
            "replicas": len(replicas), "restartCount": generation,
            "processRestarts": int(job.status.get("processRestarts") or 0) + (1 if counted else 0),
            "stragglers": None,
            "lastRestart": {"reason": reason, "lostNodes": [], "replacements": [], "movedRanks": 0,
                            "previousReplicas": len(job.placement.get("ranks") or []), "detectedAt": now,
                            **record, "decidedAt": now, "releasedAt": None, **_resume(checkpoint)},
            "conditions": conditions, **extra,
        }
        if checkpoint is not None:
            patch["lastCheckpoint"] = checkpoint
        if await self._patch_status(job, patch) is None:
            return False
        self._crash_point("restart-recorded")
        return True

    def _below_desired(self, job: JobView, conditions: list[dict[str, Any]], placed: int) -> list[dict[str, Any]]:
        """BelowDesired=True while an elastic job runs with fewer replicas than spec.replicas."""
        desired = job.desired_replicas or placed
        if placed < desired:
            return cond.set_condition(conditions, cond.BELOW_DESIRED, "True", "Shrunk",
                                      f"{placed} of {desired} replicas placed", job.generation)
        if cond.is_true(conditions, cond.BELOW_DESIRED):
            return cond.set_condition(conditions, cond.BELOW_DESIRED, "False", "AtDesired",
                                      f"{placed} replicas placed", job.generation)
        return conditions

    # --- elastic resize ---------------------------------------------------------------------------

    async def _resize(self, job: JobView, action: Action) -> None:
        """spec.replicas differs from the running gang's size. A shrink drops replicas from the least
        dense domain; a grow is a delta solve next to the job (current ranks keep their nodes). Either
        way the gang restarts as a new generation, from a checkpoint taken for it when ranks report."""
        assert action.request is not None
        spec = TrainingJob.model_validate(job.body).spec
        policy = spec.elastic_policy
        ranks = sorted(job.placement["ranks"], key=lambda r: r["rank"])
        current, desired = len(ranks), spec.replicas
        slots = [RankSlot(r["rank"], r["node"], tuple(r["gpus"])) for r in ranks]
        models = self._models(s.node for s in slots)
        if models is None:
            return  # a node of the gang is unknown: the fault path comes first
        user = int(job.placement.get("desiredReplicas") or current) != desired  # kubectl scale / an edit
        now = time.time()
        started = time.perf_counter()
        if desired < current:
            size = largest_valid(desired, 1, spec.gpus_per_replica, spec.parallelism) or desired
            kept = choose_shrink(slots, models, current - size)
            replicas = [(models[s.node], s.gpus) for s in kept]
            moved = sum(1 for i, s in enumerate(kept) if s.rank != i)
        else:
            if not user and now - self._last_generation(job, now) < policy.cooldown_seconds:
                return
            attempt = self._grow_attempts.get(job.key)
            if attempt is not None and attempt[0] == self.state.usage.freed and \
                    time.monotonic() - attempt[1] < self.settings.placement.retry_seconds:
                return  # nothing was freed since the last attempt found no room (nodes back: the retry period)
            grown = self._grow(job, action.request, spec, slots, desired, 1 if user else policy.min_growth)
            if grown is None:
                self._grow_attempts[job.key] = (self.state.usage.freed, time.monotonic())
                message = f"{current} of {desired} replicas: no room to grow next to the job"
                if not cond.unchanged(job.conditions, cond.BELOW_DESIRED, "NoCapacity", message):
                    conditions = cond.set_condition(job.conditions, cond.BELOW_DESIRED, "True", "NoCapacity", message,
                                                    job.generation)
                    await self._patch_status(job, {"conditions": conditions})
                return
            self._grow_attempts.pop(job.key, None)
            snapshot = self.state.snapshot()
            replicas = [(models[s.node], s.gpus) for s in slots] + [(snapshot.node(r.new), r.gpus) for r in grown]
            moved = 0
        metrics.RESIZE_SECONDS.observe(time.perf_counter() - started)
        if len(replicas) == current or not self._checkpoint_first(job, policy, now):
            return
        generation = job.restart_count + 1
        reason = "ScaleUp" if len(replicas) > current else "ScaleDown"
        message = f"restart {generation}: resized from {current} to {len(replicas)} replicas ({reason})"
        if not await self._new_generation(job, reason, message, replicas, {"movedRanks": moved}, {}):
            return
        metrics.RESTARTS.labels(reason).inc()
        await self._event(job, "Normal", "Resized", message, key=str(generation))
        await self._delete_pods(job.key, tuple(p.name for p in self.state.job_pods(job.key) if not p.terminating), ())
        await self._materialise(self._current(job), None)

    def _grow(self, job: JobView, request: GangRequest, spec: TrainingJobSpec, slots: list[RankSlot], desired: int,
              min_growth: int) -> list[Replacement] | None:
        """The largest valid growth towards `desired` that fits next to the job, or None."""
        snapshot = self.state.snapshot()
        for size in range(desired, len(slots), -1):
            if size - len(slots) < min_growth:
                break
            if not valid_size(size, spec.gpus_per_replica, spec.parallelism):
                continue
            decision = solve_growth(snapshot, request, slots, size - len(slots))
            if decision.found:
                return list(decision.replacements)
        return None

    def _models(self, names: Iterable[str]) -> dict[str, GpuNode] | None:
        """The node models (usable now, or last seen usable) of these nodes; None if one is unknown."""
        out: dict[str, GpuNode] = {}
        for name in names:
            model = self.state.nodes.get(name) or self.state.last_model.get(name)
            if model is None:
                return None
            out[name] = model
        return out

    def _last_generation(self, job: JobView, now: float) -> float:
        """When the gang's current generation was decided (its placement, or its last restart)."""
        stamp = (job.status.get("lastRestart") or {}).get("decidedAt") or job.condition(cond.PLACED).get(
            "lastTransitionTime")
        return epoch(stamp, now)

    def _checkpoint_first(self, job: JobView, policy: ElasticPolicy, now: float) -> bool:
        """True when the resize may go ahead: no checkpoint wanted, nobody reports, or the checkpoint
        every rank was asked for is in (or timed out)."""
        progress = self.book.jobs.get(job.key)
        if not policy.checkpoint_before_resize or progress is None or progress.generation != job.restart_count:
            return True
        step_seconds = (job.status.get("stepTime") or {}).get("p50Seconds")
        if not self._checkpoint_ready(job, policy.checkpoint_timeout_seconds, step_seconds, now):
            asyncio.get_running_loop().call_later(1.0, self.wake)
            return False
        self._end_checkpoint_request(job.key)
        return True

    async def _shrink_on_loss(self, job: JobView, action: Action, lost_nodes: list[str],
                              unhealthy: list[dict[str, Any]], message: str) -> bool:
        """onNoReplacement: Shrink — continue on the survivors (at least minReplicas, a valid size);
        False when that is not possible (the caller requeues)."""
        spec = TrainingJob.model_validate(job.body).spec
        ranks = sorted(job.placement["ranks"], key=lambda r: r["rank"])
        survivors = [RankSlot(r["rank"], r["node"], tuple(r["gpus"])) for r in ranks if r["node"] not in lost_nodes]
        size = largest_valid(len(survivors), spec.effective_min_replicas, spec.gpus_per_replica, spec.parallelism)
        models = self._models(s.node for s in survivors)
        if size is None or models is None:
            return False
        kept = choose_shrink(survivors, models, len(survivors) - size)
        replicas = [(models[s.node], s.gpus) for s in kept]
        message = f"{message}; shrunk from {len(ranks)} to {size} replicas (onNoReplacement: Shrink)"
        record = {"lostNodes": lost_nodes, "movedRanks": sum(1 for i, s in enumerate(kept) if s.rank != i),
                  "detectedAt": min((u["since"] for u in unhealthy if u["name"] in lost_nodes), default=cond.now_iso())}
        conditions_job = JobView({**job.body, "status": {**job.status, "conditions": cond.set_condition(
            job.conditions, cond.DEGRADED, "False", "Shrunk", message, job.generation)}})
        if not await self._new_generation(conditions_job, action.reason, message, replicas, record,
                                          {"unhealthyNodes": unhealthy}):
            return False
        await self._event(job, "Warning", "Shrunk", message)
        return True

    async def _no_replacement(self, job: JobView, action: Action, lost_nodes: list[str], lost: int, why: str,
                              unhealthy: list[dict[str, Any]], everyone: tuple[str, ...],
                              on_lost: tuple[str, ...]) -> None:
        """No node fits a lost rank. Within replacementTimeoutSeconds the healthy ranks keep their
        nodes (Degraded) and the search is retried as capacity frees; then onNoReplacement applies."""
        policy = job.fault_policy
        message = f"no replacement for {lost} lost ranks: {why}"
        degraded = job.condition(cond.DEGRADED)
        waiting_since = degraded.get("lastTransitionTime") if degraded.get("status") == "True" and \
            degraded.get("reason") == "NoReplacement" else None
        clock = time.time()
        waited = clock - epoch(waiting_since, clock)
        if waited < policy.replacement_timeout_seconds:
            if waiting_since is None or unhealthy != job.status.get("unhealthyNodes"):
                conditions = cond.set_condition(job.conditions, cond.DEGRADED, "True", "NoReplacement",
                                                f"{message}; waiting up to {policy.replacement_timeout_seconds}s",
                                                job.generation)
                if await self._patch_status(job, {"unhealthyNodes": unhealthy, "conditions": conditions}) is None:
                    return
                await self._event(job, "Warning", "NoReplacement", message, key="waiting")
            retry = min(self.settings.placement.retry_seconds, policy.replacement_timeout_seconds - waited)
            asyncio.get_running_loop().call_later(max(0.5, retry), self.wake)
            return
        metrics.RESTARTS.labels(action.reason).inc()
        generation = job.restart_count + 1
        now = cond.now_iso()
        if policy.on_no_replacement == "Shrink" and await self._shrink_on_loss(job, action, lost_nodes, unhealthy,
                                                                              message):
            await self._quarantine(tuple(NodeLoss(n, action.reason, message, None) for n in lost_nodes))
            await self._delete_pods(job.key, everyone, on_lost)
            await self._materialise(self._current(job), None)
            return
        if policy.on_no_replacement == "Fail":
            conditions = cond.set_condition(job.conditions, cond.FAILED, "True", "NoReplacement", message,
                                            job.generation)
            patch: dict[str, Any] = {"unhealthyNodes": unhealthy, "completionTime": now, "conditions": conditions}
        else:  # Requeue: the whole gang is placed again, as a new generation
            message += f"; re-queued after {policy.replacement_timeout_seconds}s"
            conditions = cond.set_condition(job.conditions, cond.PLACED, "False", "NoReplacement", message,
                                            job.generation)
            if cond.get(conditions, cond.RUNNING):
                conditions = cond.set_condition(conditions, cond.RUNNING, "False", "NoReplacement", message,
                                                job.generation)
            conditions = cond.set_condition(conditions, cond.RESTARTING, "True", action.reason, message,
                                            job.generation)
            conditions = cond.set_condition(conditions, cond.DEGRADED, "True", "Requeued", message, job.generation)
            checkpoint = self.committed_checkpoint(job)
            patch = {"placement": None, "replicas": 0, "restartCount": generation, "unhealthyNodes": unhealthy,
                     "lastRestart": {"reason": action.reason, "lostNodes": lost_nodes,
                                     "replacements": [], "movedRanks": len(job.placement.get("ranks") or []),
                                     "detectedAt": min((u["since"] for u in unhealthy
                                                        if u["name"] in lost_nodes), default=now),
                                     "decidedAt": now, "releasedAt": None, **_resume(checkpoint)},
                     "conditions": conditions}
            if checkpoint is not None:
                patch["lastCheckpoint"] = checkpoint
        if await self._patch_status(job, patch) is not None:
            await self._event(job, "Warning", "NoReplacement", message, key=f"final/{generation}")
            await self._delete_pods(job.key, everyone, on_lost)

    async def _quarantine(self, losses: tuple[NodeLoss, ...], lift_after: float = 0) -> None:
        """Keep every job off a lost node until an admin lifts the taint
        (`kubectl taint node NODE railyard.dev/unhealthy-`), or, with `lift_after` (a straggler's
        stragglerPolicy.quarantineSeconds), until the operator lifts it then."""
        if not self.settings.placement.quarantine:
            return
        until = {ANNOTATION_QUARANTINED_UNTIL: iso(time.time() + lift_after)} if lift_after > 0 else None
        for loss in losses:
            if loss.node in self.state.health:
                await self.api.taint_node(loss.node, {"key": QUARANTINE_TAINT, "value": loss.reason,
                                                      "effect": "NoSchedule"}, until)

    async def _lift_expired_quarantines(self, now: float) -> None:
        for name, health in list(self.state.health.items()):
            until = (health["metadata"].get("annotations") or {}).get(ANNOTATION_QUARANTINED_UNTIL)
            if until and epoch(until, now) <= now:
                log.info("node %s: quarantine ended (%s); lifting the %s taint", name, until, QUARANTINE_TAINT)
                await self.api.lift_quarantine(name, QUARANTINE_TAINT, ANNOTATION_QUARANTINED_UNTIL)

    async def _event(self, job: JobView, type_: str, reason: str, message: str, key: str = "") -> None:
        """Post an Event; a repeat (same job, reason and key) bumps the existing Event's count."""
        now = cond.now_iso()
        name = event_name(job.body, reason, key or message)
        count, first = self._events.get(name, (0, now))
        self._events[name] = (count + 1, first)
        if len(self._events) > 10000:  # bounded: forget the oldest half
            for old in list(self._events)[:5000]:
                del self._events[old]
        await self.api.post_event(build_event(job.body, type_, reason, message, now, key or message, count + 1, first),
                                  existing=count > 0)

    # --- metrics ------------------------------------------------------------------------------------

    def _observe(self, snapshot: Snapshot) -> None:
        states: dict[str, int] = {s: 0 for s in ("Queued", "Placed", "Running", "Succeeded", "Failed")}
        oldest: dict[str, float] = dict.fromkeys(WAIT_REASONS, 0.0)
        per_job: list[metrics.JobFigures] = []
        now = time.time()
        for body in self.state.jobs.values():
            job = JobView(body)
            state = cond.state_of(job.conditions)
            states[state] += 1
            checkpointed = None
            if state == "Running":  # staleness counts from the start while nothing was saved yet
                stamp = (job.status.get("lastCheckpoint") or {}).get("time") or job.status.get("startTime")
                checkpointed = epoch(stamp, now) if stamp else None
            per_job.append(metrics.JobFigures(
                job.namespace, job.name, state, job.placement.get("tors"), job.status.get("replicas") or 0,
                job.restart_count, checkpointed,
                ((job.body.get("spec") or {}).get("checkpoint") or {}).get("intervalSeconds"),
                (job.status.get("stepTime") or {}).get("p50Seconds") if state == "Running" else None,
                len(job.status.get("stragglers") or []) if job.straggler_policy is not None else None))
            if state == "Queued":
                reason = job.condition(cond.PLACED).get("reason") or "New"
                waited = max(0.0, now - epoch(job.queued_since, now))
                oldest[reason] = max(oldest.get(reason, 0.0), waited)
        for state, count in states.items():
            metrics.JOBS.labels(state).set(count)
        for reason, waited in oldest.items():  # reasons are the Placed condition's: a bounded set
            metrics.OLDEST_WAIT.labels(reason).set(waited)
        self._job_series.update(per_job)
        metrics.QUARANTINED_NODES.set(sum(1 for h in self.state.health.values()
                                          if any(t.get("key") == QUARANTINE_TAINT for t in h["spec"]["taints"])))
        metrics.observe_capacity(snapshot)


def _straggler_restart(job: JobView, straggler: Straggler) -> Action:
    message = (f"node {straggler.node} (ranks {', '.join(map(str, straggler.ranks))}) computes at "
               f"{straggler.score:.2f} of the fastest comparable node's speed since {iso(straggler.since)}")
    return Action(Kind.RESTART, "Straggler", message,
                  request=GangRequest.from_job(TrainingJob.model_validate(job.body)),
                  losses=(NodeLoss(straggler.node, "Straggler", message, iso(straggler.since)),))


def _resume(checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    """The resume point a restart records (builders pass it to every rank of the new generation)."""
    if checkpoint is None:
        return {"resumeStep": None, "resumeCheckpoint": None}
    return {"resumeStep": checkpoint["step"], "resumeCheckpoint": checkpoint.get("path") or ""}


def _api_message(e: ApiException) -> str:
    try:
        return json.loads(e.body or "{}").get("message") or str(e.reason)
    except ValueError:
        return str(e.reason)
