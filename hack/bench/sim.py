"""The operator's own decisions on simulated time, for the benchmarks that need hours of a cluster's life in
seconds (core/reservation, core/defrag, core/spares): TrainingJobs parsed as the operator parses them, each pass
decided by the operator's decide/pass_plan.plan_pass, each restart and move by decide/restart_plan.plan_restart,
with the operator's settings model, and the status written through its own transitions (decide/status_transitions.py).
What the simulation replaces: the API server (a merge patch on a dict), kube-scheduler and the kubelets (a
placed gang is bound and running at once, and ends exactly at its lifetime), the report endpoint (a move's
checkpoint takes `move_seconds`), and the event loop (a pass is driven to its end)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from railyard.operator.base.objects import Job, Key, parse_job
from railyard.operator.base.reasons import ConditionType
from railyard.operator.base.settings import Settings
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.actions import Restart
from railyard.operator.decide.backfill import expected_end
from railyard.operator.decide.holds import Hold, PendingMove
from railyard.operator.decide.pass_plan import PassInput, PassPlan, QueueMemory, drive, plan_pass
from railyard.operator.decide.priority import PriorityClassView
from railyard.operator.decide.queue import QueuedJob, admit
from railyard.operator.decide.restart_plan import RestartInput, RestartKind, RestartPlan, plan_restart
from railyard.operator.decide.room import RoomView
from railyard.topology.cluster.faults import LossReason, NodeLoss
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.solver.decision import decide
from railyard.topology.solver.placement import Placement

Slots = tuple[tuple[str, tuple[int, ...]], ...]
EPOCH = 1_800_000_000.0  # simulated second 0 as wall time (status timestamps; durations are what they are)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies a status patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def training_job(name: str, replicas: int, gpus: int, *, required_tier: str | None = None,
                 preferred_tier: str | None = None, priority_class: str | None = None, migratable: bool = False,
                 backfill_spares: bool = False, namespace: str = "bench", time_limit: int | None = None
                 ) -> dict[str, Any]:
    """A TrainingJob as a user would write it (one container asking for `gpus` GPUs; `time_limit`: its
    spec.timeLimitSeconds)."""
    topology = {k: v for k, v in (("requiredTier", required_tier), ("preferredTier", preferred_tier)) if v}
    spec: dict[str, Any] = {"replicas": replicas, "topology": topology,
                            "preemption": {"migratable": migratable, "backfillSpares": backfill_spares},
                            "template": {"spec": {"containers": [{"name": "trainer", "image": "sim",
                                                                  "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if time_limit is not None:
        spec["timeLimitSeconds"] = time_limit
    return {"apiVersion": "railyard.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace, "uid": uuid.uuid4().hex, "generation": 1,
                         "resourceVersion": "1"}, "spec": spec}


@dataclass
class Running:
    slots: Slots
    requests: Mapping[str, int]
    ends: float  # simulated seconds


@dataclass
class SimCluster:
    snapshot: Snapshot  # the empty cluster to start from
    settings: Settings
    classes: dict[str, PriorityClassView] = field(default_factory=dict)
    move_seconds: float = 0.0  # a move's checkpoint: the mover keeps its nodes this long before it restarts
    restart_cost: float = 0.0  # the work a restart throws away: a moved gang runs this much longer
    now: float = 0.0
    bodies: dict[Key, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[Key, Job] = field(default_factory=dict)
    lifetimes: dict[Key, float] = field(default_factory=dict)
    arrived: dict[Key, float] = field(default_factory=dict)
    running: dict[Key, Running] = field(default_factory=dict)
    memory: dict[Key, QueueMemory] = field(default_factory=dict)
    holds: dict[Key, Hold] = field(default_factory=dict)
    cooling: dict[Key, float] = field(default_factory=dict)
    moves: dict[Key, PendingMove] = field(default_factory=dict)
    moves_started: list[float] = field(default_factory=list)
    move_due: dict[Key, float] = field(default_factory=dict)  # mover -> when its move's checkpoint is done
    freed: int = 0
    down: set[str] = field(default_factory=set)  # nodes out of service (failed, not yet repaired)
    epoch: int = 0  # changes with the usable node set (what the queue's never-fits memo is keyed by)
    reservations: int = 0  # starvation reservations taken
    backfilled: int = 0  # jobs placed on reserved nodes by their declared limits
    waits: dict[Key, float] = field(default_factory=dict)  # job -> seconds from arrival to placement
    plans: int = 0
    moved: list[tuple[Key, float]] = field(default_factory=list)  # (mover, GPU-seconds its move cost)

    def __post_init__(self) -> None:
        self.current = self.snapshot

    # --- the world ---------------------------------------------------------------------------------

    def submit(self, body: dict[str, Any], lifetime: float, arrival: float | None = None) -> Key:
        """A job created at `arrival` (default: now), running `lifetime` seconds once placed."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        arrived = self.now if arrival is None else arrival
        body = merge_patch(body, {"status": {"queuedSince": _stamp(arrived)}})  # the API's second resolution
        self.bodies[key], self.jobs[key] = body, parse_job(body)
        self.lifetimes[key], self.arrived[key] = lifetime, arrived
        return key

    def _write(self, key: Key, patch: Any) -> Job:
        body = self.bodies[key]
        raw = patch.as_patch() if hasattr(patch, "as_patch") else patch
        body = merge_patch(body, {"status": raw})
        body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        self.bodies[key], self.jobs[key] = body, parse_job(body)
        return self.jobs[key]

    def _end(self, key: Key) -> None:
        run = self.running.pop(key)
        self.current = self.current.release(run.slots, run.requests)
        self.freed += 1
        for table in (self.bodies, self.jobs, self.lifetimes, self.arrived, self.memory, self.holds, self.cooling,
                      self.moves, self.move_due):
            table.pop(key, None)

    def _take(self, key: Key, placement: Placement) -> None:
        job = self.jobs[key]
        requests = dict(job.request.resources) if job.request is not None else {}
        slots = tuple((node, tuple(gpus)) for node, gpus in placement.allocations)
        self.current = self.current.allocate(slots, requests)
        limit = job.spec.time_limit_seconds if job.spec is not None else None
        # The operator ends a gang at its declared limit (decide/assess.py): it runs its lifetime or that.
        runs = self.lifetimes[key] if limit is None else min(self.lifetimes[key], limit)
        self.running[key] = Running(slots, requests, self.now + runs)

    # --- a pass ------------------------------------------------------------------------------------

    def step(self, now: float) -> PassPlan:
        """Time moves to `now`: gangs past their lifetime end, moves whose checkpoint is done are carried out,
        then one pass is decided and applied (a placed gang runs at once)."""
        self.now = now
        for key in [k for k, run in self.running.items() if run.ends <= now]:
            self._end(key)
        for key in [k for k, due in self.move_due.items() if due <= now]:
            self._move(key)
        plan = drive(plan_pass(self.given()))
        self.plans += 1
        self._apply(plan)
        return plan

    def waiting(self) -> list[QueuedJob]:
        out = []
        for key, job in self.jobs.items():
            if key in self.running or job.request is None:
                continue
            entry = admit(job, job.request, self.classes, EPOCH + self.now)
            if isinstance(entry, QueuedJob):  # a job of a missing class waits out of the queue
                out.append(entry)
        return out

    def given(self) -> PassInput:
        jobs = dict(self.jobs)
        wall = EPOCH + self.now
        room = RoomView(jobs, self.classes, dict(self.holds), self.cooling, dict(self.moves), list(self.moves_started),
                        self._leaving, lambda job: None, self.settings, wall, self.now,
                        decide=lambda s, r: decide(s, r))
        reserving = frozenset(k for k, job in jobs.items()
                              if (placed := job.condition(ConditionType.PLACED)) is not None
                              and placed.reason == "Reserving")
        return PassInput(self.view(), tuple(self.waiting()), jobs, dict(self.memory), room, reserving, list,
                         self.freed, self.epoch, wall, self.now, self.settings, occupants=self.occupants)

    def occupants(self) -> dict[str, list[tuple[float, int]]]:
        """What holds GPUs per node and when it is expected gone by its declared limit (never without one)."""
        out: dict[str, list[tuple[float, int]]] = {}
        for key, run in self.running.items():
            end = expected_end(self.jobs.get(key), self.settings.placement.resync_seconds)
            for node, gpus in run.slots:
                out.setdefault(node, []).append((end, len(gpus)))
        return out

    def fail(self, node: str) -> None:
        self.down.add(node)
        self.epoch += 1

    def repair(self, node: str) -> None:
        self.down.discard(node)
        self.epoch += 1

    def view(self) -> Snapshot:
        """The cluster as the operator sees it now: the nodes out of service are not usable."""
        return self.current.without_nodes(frozenset(self.down)) if self.down else self.current

    def _leaving(self, jobs: Iterable[Key] | None) -> list[tuple[str, tuple[int, ...], Mapping[str, int]]]:
        return []  # pods end at once here: nothing is ever Terminating

    def _apply(self, plan: PassPlan) -> None:
        self.reservations += sum(1 for key, value in plan.memory.items() if value.reserved_at is not None
                                 and (key not in self.memory or self.memory[key].reserved_at is None))
        self.memory.update(plan.memory)
        self.backfilled += len({b.job for b in plan.backfilled})
        self.holds = dict(plan.holds)
        for expired in plan.expired:
            self.cooling[expired.key] = self.now + self.settings.preemption.hold_seconds
        for key, move in plan.moves.items():
            self.moves[key] = move
            self.move_due[key] = self.now + self.move_seconds
        self.moves_started = list(plan.moves_started)
        stamp = _time(self.now)
        for key, decision in plan.placed:
            assert decision.placement is not None
            job = self._write(key, transitions.placing(self.jobs[key], decision.placement, uuid.uuid4().hex[:10],
                                                       stamp, plan.priorities[key]))
            self._write(key, transitions.released(job, stamp))
            self._take(key, decision.placement)
            self.waits[key] = self.now - self.arrived[key]
        for entry in plan.unplaced:
            unplaced = transitions.unplaced(self.jobs[entry.key], entry.reason, entry.message(), stamp)
            if unplaced is not None:
                self._write(entry.key, unplaced)

    # --- restarts ----------------------------------------------------------------------------------

    def restart(self, key: Key, losses: tuple[NodeLoss, ...], reason: LossReason) -> RestartPlan:
        """The operator's restart of a running gang (its gate passed), applied at once."""
        job = self.jobs[key]
        assert job.request is not None
        models: dict[str, GpuNode] = {n.name: n for n in self.snapshot.nodes}
        plan = plan_restart(RestartInput(job, Restart(reason, "simulated", job.request, losses), self.view(), models,
                                         {}, {}, len(models), (), self.holds, False, lambda _: 0, 0, list,
                                         EPOCH + self.now, self.settings))
        if plan.kind in (RestartKind.RESTART, RestartKind.SHRINK):
            old = self.running[key]
            self.current = self.current.release(old.slots, old.requests)
            slots = tuple((node.name, gpus) for node, gpus in plan.replicas)
            self.current = self.current.allocate(slots, old.requests)
            self.running[key] = Running(slots, old.requests, old.ends)
            # The new attempt written ahead and released, as the operator writes it (act/attempts.py).
            stamp = _time(self.now)
            placement = Placement.from_replicas(list(plan.replicas), self.snapshot.levels)
            job = self._write(key, transitions.new_attempt(job, reason, plan.message, placement, uuid.uuid4().hex[:10],
                                                           stamp, dict(plan.record), None, False,
                                                           list(plan.unhealthy)))
            self._write(key, transitions.released(job, stamp))
        elif plan.kind is not RestartKind.NO_ROOM:
            # No replacement: as after the replacement timeout with onNoReplacement Requeue (or Fail), the
            # gang's pods go and it is placed again as a whole by a later pass.
            self._requeue(key, plan)
        return plan

    def _requeue(self, key: Key, plan: RestartPlan) -> None:
        old = self.running.pop(key)
        self.current = self.current.release(old.slots, old.requests)
        self.freed += 1
        job = self.jobs[key]
        self._write(key, transitions.requeued(job, LossReason.NODE_DELETED, list(plan.lost_names),
                                              list(plan.unhealthy), plan.message, None, _time(self.now)))

    def _move(self, key: Key) -> None:
        move = self.moves.pop(key, None)
        self.move_due.pop(key, None)
        if move is None or key not in self.running:
            return
        losses = tuple(NodeLoss(n, LossReason.MIGRATION, "moved", None) for n in sorted(move.nodes))
        plan = self.restart(key, losses, LossReason.MIGRATION)
        if plan.kind is RestartKind.RESTART:
            run = self.running[key]
            run.ends += self.restart_cost
            self.moved.append((key, sum(len(g) for _, g in run.slots) * self.restart_cost))
        elif not any(m.waiting == move.waiting for m in self.moves.values()):
            self.holds.pop(move.waiting, None)  # called off: nothing sits idle for it


def _stamp(seconds: float) -> str:
    return _time(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(EPOCH + seconds, UTC)
