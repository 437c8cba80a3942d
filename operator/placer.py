"""The placement loop: snapshot -> pure decisions -> API calls. Runs only on the leader.

Placing a job is crash-safe by construction:
1. the placement (ranks, nodes, GPUs, a placement id) is written to the job's status first; from then
   on those GPUs count as used even if no pod exists yet;
2. the headless Service and all pods are created, gated and pinned (creation is idempotent);
3. only when every pod exists are all gates removed, then `Placed` becomes reason `Released`.
A leader that starts later finds any job stuck between 1 and 3 (`assess` -> resume) and finishes
it, or rolls it back if a node of the placement is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from railyard.operator import conditions as cond
from railyard.operator import metrics
from railyard.operator.builders import build_event, build_pod, build_service, placement_status, selector
from railyard.operator.kubeapi import KubeApi
from railyard.operator.queue import QueuedJob, order, reserved_nodes, without
from railyard.operator.reconcile import PLACING, RELEASED, Action, assess
from railyard.operator.settings import Settings
from railyard.operator.state import ClusterState, Key
from railyard.topology.api import TrainingJob
from railyard.topology.model import Snapshot
from railyard.topology.request import GangRequest
from railyard.topology.solver import Decision, solve

log = logging.getLogger("railyard.placer")


def _epoch(timestamp: str | None, default: float) -> float:
    if not timestamp:
        return default
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


class Placer:
    def __init__(self, state: ClusterState, api: KubeApi, settings: Settings, is_leader: Callable[[], bool]) -> None:
        self.state = state
        self.api = api
        self.settings = settings
        self.is_leader = is_leader
        self._wake = asyncio.Event()
        self._limit = asyncio.Semaphore(settings.api.workers)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.placement.resync_seconds)
            # Let a burst of events (200 jobs created at once, a heartbeat wave) land first, so one
            # iteration sees them all instead of one iteration per event.
            await asyncio.sleep(0.05)
            self._wake.clear()
            leader = self.is_leader()
            metrics.IS_LEADER.set(int(leader))
            if not leader:
                continue
            try:
                await self.run_once()
            except Exception:  # the loop must survive anything one iteration meets
                log.exception("placement iteration failed; retrying")

    # --- one iteration ------------------------------------------------------------------------------

    async def run_once(self) -> None:
        now = time.time()
        snapshot = self.state.snapshot()
        queued: list[QueuedJob] = []
        work: list[Awaitable[None]] = []
        for key, job in list(self.state.jobs.items()):
            if job["metadata"].get("deletionTimestamp"):
                continue
            try:
                action = assess(job, self.state.job_pods(key), snapshot, now,
                                self.settings.placement.bind_timeout_seconds)
                if action.kind == "queue":
                    assert action.model is not None
                    queued.append(self._queued(key, job, action.model, now))
                elif action.kind not in ("wait", "done"):
                    work.append(self._guard(key, self._act(key, job, action)))
            except Exception:
                log.exception("job %s/%s: cannot assess; skipping it this round", *key)
        await asyncio.gather(*work)
        placements = await self._place_queue(queued, snapshot, now)
        self._observe(snapshot if not placements else self.state.snapshot())

    async def _guard(self, key: Key, step: Awaitable[None]) -> None:
        try:
            await step
        except Exception:
            log.exception("job %s/%s: step failed; will retry", *key)

    def _queued(self, key: Key, job: dict[str, Any], model: TrainingJob, now: float) -> QueuedJob:
        since = (job.get("status") or {}).get("queuedSince") or job["metadata"].get("creationTimestamp")
        return QueuedJob(key, model.spec.priority, _epoch(since, now), GangRequest.from_job(model))

    async def _place_queue(self, queued: list[QueuedJob], snapshot: Snapshot, now: float) -> int:
        current = snapshot
        reserved: frozenset[str] = frozenset()
        holder: Key | None = None
        placed: list[tuple[dict[str, Any], Decision]] = []
        unplaced: list[tuple[dict[str, Any], Decision, bool]] = []
        ordered = order(queued)
        # A reservation, once taken, holds across iterations: its holder goes first and its domain is
        # fenced off before anything else is tried (timestamps have one-second resolution, so queue
        # order alone could let a job created in the same second slip in front of it).
        for job in ordered:
            body = self.state.jobs.get(job.key) or {}
            if (cond.get((body.get("status") or {}).get("conditions"), cond.PLACED) or {}).get("reason") == "Reserving":
                holder, reserved = job.key, reserved_nodes(job, current)
                ordered = [job, *(j for j in ordered if j.key != job.key)]
                break
        for job in ordered:
            view = without(current, reserved) if holder is not None and job.key != holder else current
            started = time.perf_counter()
            decision = solve(view, job.request)
            metrics.SOLVE_SECONDS.observe(time.perf_counter() - started)
            body = self.state.jobs.get(job.key)
            if body is None:
                continue
            if decision.placement is not None:
                current = current.allocate(decision.placement.allocations)
                placed.append((body, decision))
                if job.key == holder:  # the reservation served its purpose
                    holder, reserved = None, frozenset()
                continue
            starving = now - job.queued_since > self.settings.placement.starvation_seconds
            if starving and holder is None:
                holder, reserved = job.key, reserved_nodes(job, current)
            unplaced.append((body, decision, job.key == holder))
        await asyncio.gather(*(self._guard(self._key(b), self._mark_unplaced(b, d, r)) for b, d, r in unplaced))
        await asyncio.gather(*(self._guard(self._key(b), self._place(b, d)) for b, d in placed))
        metrics.QUEUE_LENGTH.set(len(unplaced))
        return len(placed)

    @staticmethod
    def _key(job: dict[str, Any]) -> Key:
        return (job["metadata"]["namespace"], job["metadata"]["name"])

    # --- placing ------------------------------------------------------------------------------------

    async def _place(self, job: dict[str, Any], decision: Decision) -> None:
        placement = decision.placement
        assert placement is not None
        meta = job["metadata"]
        status = job.get("status") or {}
        placement_id = uuid.uuid4().hex[:10]
        message = (f"{len(placement.replicas)} replicas on {placement.tors} TORs, {placement.leaves} leaves, "
                   f"{placement.spines} spines; {'rail-aligned' if placement.rail_aligned else 'not rail-aligned'}")
        patch = {
            "placement": placement_status(placement, meta["name"], placement_id),
            "replicas": len(placement.replicas),
            "selector": selector(meta["name"]),
            "observedGeneration": meta.get("generation"),
            "queuedSince": status.get("queuedSince") or meta.get("creationTimestamp"),
            "conditions": cond.set_condition(status.get("conditions"), cond.PLACED, "True", PLACING, message,
                                             meta.get("generation")),
        }
        updated = await self.api.patch_job_status(meta["namespace"], meta["name"], patch)
        if updated is None:
            return
        self.state.apply_job("MODIFIED", updated)  # count the reservation before the watch echoes it
        await self._materialise(self.state.jobs[self._key(job)], None)

    async def _materialise(self, job: dict[str, Any], only: tuple[str, ...] | None) -> None:
        """Create the Service and the (missing) pods, then release the whole gang at once."""
        meta = job["metadata"]
        status = job["status"]
        placement = status["placement"]
        ranks = placement["ranks"]
        await self.api.create_service(build_service(job))
        pods = [
            build_pod(job, r["rank"], r["node"], r["gpus"], len(ranks), placement.get("railAligned", False),
                      placement["id"], self.settings.placement.master_port)
            for r in ranks if only is None or r["pod"] in only
        ]
        await asyncio.gather(*(self._limited(self.api.create_pod(p)) for p in pods))
        self._crash_point("pods-created")
        gate = len((job["spec"].get("template") or {}).get("spec", {}).get("schedulingGates") or [])
        await asyncio.gather(*(self._limited(self.api.release_pod(meta["namespace"], r["pod"], gate)) for r in ranks))
        self._crash_point("released")
        conditions = cond.set_condition(status.get("conditions"), cond.PLACED, "True", RELEASED,
                                        cond.get(status.get("conditions"), cond.PLACED)["message"],
                                        meta.get("generation"))
        updated = await self.api.patch_job_status(meta["namespace"], meta["name"], {"conditions": conditions})
        if updated is not None:
            self.state.apply_job("MODIFIED", updated)
        created = _epoch(meta.get("creationTimestamp"), time.time())
        metrics.RELEASE_SECONDS.observe(max(0.0, time.time() - created))
        metrics.PLACEMENTS.inc()
        metrics.TORS_SPANNED.observe(placement.get("tors", 0))
        await self._event(job, "Normal", "Released", f"gang of {len(ranks)} released: "
                          f"{placement.get('tors')} TORs, rail-aligned={placement.get('railAligned')}")

    async def _limited(self, step: Awaitable[Any]) -> Any:
        async with self._limit:
            return await step

    def _crash_point(self, name: str) -> None:
        if self.settings.crash_after == name:
            log.warning("RAILYARD_TEST_CRASH_AFTER=%s: exiting now (fault injection)", name)
            os._exit(17)

    # --- other actions --------------------------------------------------------------------------------

    async def _mark_unplaced(self, job: dict[str, Any], decision: Decision, reserving: bool) -> None:
        meta = job["metadata"]
        status = job.get("status") or {}
        reason = "Reserving" if reserving else "Unschedulable"
        message = decision.reason or "no placement"
        if reserving:
            message += "; waited past the starvation limit: its domain is reserved"
        if cond.unchanged(status.get("conditions"), cond.PLACED, reason, message):
            return
        metrics.PLACEMENT_FAILURES.labels(reason).inc()
        patch = {
            "queuedSince": status.get("queuedSince") or meta.get("creationTimestamp"),
            "observedGeneration": meta.get("generation"),
            "conditions": cond.set_condition(status.get("conditions"), cond.PLACED, "False", reason, message,
                                             meta.get("generation")),
        }
        updated = await self.api.patch_job_status(meta["namespace"], meta["name"], patch)
        if updated is not None:
            self.state.apply_job("MODIFIED", updated)
            await self._event(job, "Warning", reason, message)

    async def _act(self, key: Key, job: dict[str, Any], action: Action) -> None:
        meta = job["metadata"]
        status = job.get("status") or {}
        conditions = status.get("conditions")
        generation = meta.get("generation")
        ns = meta["namespace"]
        if action.kind == "resume":
            await self._materialise(job, action.pods)
            return
        if action.kind == "cleanup":
            await asyncio.gather(*(self._limited(self.api.delete_pod(ns, p)) for p in action.pods))
            return
        patch: dict[str, Any]
        if action.kind == "invalid":
            if cond.unchanged(conditions, cond.PLACED, action.reason, action.message):
                return
            patch = {"conditions": cond.set_condition(conditions, cond.PLACED, "False", action.reason,
                                                      action.message, generation)}
            await self._event(job, "Warning", action.reason, action.message)
        elif action.kind == "rollback":
            await asyncio.gather(*(self._limited(self.api.delete_pod(ns, p)) for p in action.pods))
            patch = {"placement": None, "replicas": 0,
                     "conditions": cond.set_condition(conditions, cond.PLACED, "False", action.reason,
                                                      action.message, generation)}
            await self._event(job, "Warning", action.reason, action.message)
        elif action.kind == "running":
            patch = {"startTime": status.get("startTime") or cond.now_iso(),
                     "conditions": cond.set_condition(conditions, cond.RUNNING, "True", action.reason,
                                                      action.message, generation)}
        elif action.kind in ("succeed", "fail"):
            type_ = cond.SUCCEEDED if action.kind == "succeed" else cond.FAILED
            updated = cond.set_condition(conditions, type_, "True", action.reason, action.message, generation)
            if cond.get(updated, cond.RUNNING):
                updated = cond.set_condition(updated, cond.RUNNING, "False", action.reason, action.message,
                                             generation)
            patch = {"completionTime": cond.now_iso(), "conditions": updated}
            await self._event(job, "Normal" if action.kind == "succeed" else "Warning", action.reason,
                              action.message)
        else:
            return
        result = await self.api.patch_job_status(ns, meta["name"], patch)
        if result is not None:
            self.state.apply_job("MODIFIED", result)

    async def _event(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        await self.api.create_event(build_event(job, type_, reason, message, cond.now_iso()))

    # --- metrics ------------------------------------------------------------------------------------

    def _observe(self, snapshot: Snapshot) -> None:
        states: dict[str, int] = {s: 0 for s in ("Queued", "Placed", "Running", "Succeeded", "Failed")}
        for job in self.state.jobs.values():
            states[cond.state_of((job.get("status") or {}).get("conditions"))] += 1
        for state, count in states.items():
            metrics.JOBS.labels(state).set(count)
        metrics.observe_capacity(snapshot)
