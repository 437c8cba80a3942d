"""The offline planner: place TrainingJobs one after another on a snapshot, each consuming capacity,
through the same decision the operator makes (decision.py): inter-pod rules against the pods given
and the gangs planned before, then solve(). With `defragment`, a job that does not fit gets the
migration plan the operator would carry out (defrag.py): gangs planned before it that allow it
(spec.preemption.migratable) are moved so it lands in one domain. A job given with a recorded
placement (`kubectl get trainingjobs -o yaml`) is taken as running there: context, not planned (its
GPUs are taken unless the pods given hold them already), and a mover when it allows it."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from railyard.topology.api.job import TrainingJob
from railyard.topology.cluster.affinity import PodInfo
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.decision import decide, placed_pods, taken
from railyard.topology.solver.defrag import MigrationPlan, Mover, plan_migration
from railyard.topology.solver.placement import Decision
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.victims import RunningGang


@dataclass(frozen=True)
class PlanResult:
    decisions: tuple[Decision, ...]
    before: Snapshot
    after: Snapshot
    solve_seconds: float
    migrations: tuple[MigrationPlan | None, ...] = ()  # per decision, with `defragment`


def plan(snapshot: Snapshot, jobs: Sequence[TrainingJob], pods: Iterable[PodInfo] = (),
         defragment: bool = False) -> PlanResult:
    """`pods`: the pods on the cluster as inter-pod rules see them (nodes.pod_infos)."""
    current = snapshot
    seen = list(pods)
    decisions: list[Decision] = []
    migrations: list[MigrationPlan | None] = []
    movers: dict[str, Mover] = {}  # the migratable gangs planned so far, where they are now
    elapsed = 0.0
    for job in jobs:
        request = GangRequest.from_job(job)
        recorded = job.status.placement if job.status is not None else None
        if recorded is not None and recorded.ranks:
            slots = tuple((r.node, tuple(r.gpus)) for r in sorted(recorded.ranks, key=lambda r: r.rank))
            current = current.allocate([(n, g) for n, g in slots if current.has_node(n)
                                        and not set(g) & current.used.get(n, frozenset())], request.resources)
            if job.spec.preemption.migratable:
                movers[request.key] = Mover(RunningGang(request.key, 0, slots, 0.0, dict(request.resources)), request)
            continue
        t0 = time.perf_counter()
        decision = decide(current, request, seen)
        moved: MigrationPlan | None = None
        if decision.placement is None and defragment and movers:
            moved = plan_migration(current, request, list(movers.values()))
            if moved is not None:
                current = _moved(current, moved, movers)
                decision = Decision(request, moved.placement, None)
        elapsed += time.perf_counter() - t0
        decisions.append(decision)
        migrations.append(moved)
        current = taken(current, decision)
        seen.extend(placed_pods(decision))
        if decision.placement is not None and job.spec.preemption.migratable:
            gang = RunningGang(request.key, 0, tuple(decision.placement.allocations), 0.0, dict(request.resources))
            movers[request.key] = Mover(gang, request)
    return PlanResult(tuple(decisions), snapshot, current, elapsed, tuple(migrations))


def _moved(snapshot: Snapshot, plan: MigrationPlan, movers: dict[str, Mover]) -> Snapshot:
    """The snapshot after the plan's moves; the movers' records follow them."""
    for move in plan.moves:
        mover = movers[move.key]
        new = {r.rank: (r.new, r.gpus) for r in move.replacements}
        slots = tuple(new.get(rank, slot) for rank, slot in enumerate(mover.gang.slots))
        snapshot = snapshot.release(mover.gang.slots, mover.request.resources).allocate(slots, mover.request.resources)
        movers[move.key] = Mover(RunningGang(move.key, 0, slots, 0.0, mover.gang.requests), mover.request)
    return snapshot


def migration_json(migration: MigrationPlan) -> dict[str, Any]:
    return {"level": migration.level, "domain": migration.domain,
            "moves": [{"job": m.key, "leaves": list(m.leaves), "to": sorted({r.new for r in m.replacements})}
                      for m in migration.moves]}


def decision_json(decision: Decision) -> dict[str, Any]:
    placement = decision.placement
    return {
        "namespace": decision.request.namespace,
        "name": decision.request.name,
        "placed": placement is not None,
        "reason": decision.reason,
        "ranks": [
            {"rank": r.rank, "node": r.node, "gpus": list(r.gpus)} for r in (placement.replicas if placement else ())
        ],
        "metrics": {
            "tors": placement.tors if placement else 0,
            "leaves": placement.leaves if placement else 0,
            "spines": placement.spines if placement else 0,
            "railAligned": placement.rail_aligned if placement else False,
        },
    }


def plan_json(result: PlanResult) -> dict[str, Any]:
    jobs = [decision_json(d) for d in result.decisions]
    for entry, migration in zip(jobs, result.migrations, strict=False):
        if migration is not None:
            entry["migration"] = migration_json(migration)
    return {
        "jobs": jobs,
        "solveSeconds": round(result.solve_seconds, 6),
    }
