"""The offline planner: place TrainingJobs one after another on a snapshot, each consuming capacity,
through the same decision the operator makes (decision.py): inter-pod rules against the pods given
and the gangs planned before, then solve()."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from railyard.topology.affinity import PodInfo
from railyard.topology.api import TrainingJob
from railyard.topology.decision import decide, placed_pods, taken
from railyard.topology.model import Snapshot
from railyard.topology.request import GangRequest
from railyard.topology.solver import Decision


@dataclass(frozen=True)
class PlanResult:
    decisions: tuple[Decision, ...]
    before: Snapshot
    after: Snapshot
    solve_seconds: float


def plan(snapshot: Snapshot, jobs: Sequence[TrainingJob], pods: Iterable[PodInfo] = ()) -> PlanResult:
    """`pods`: the pods on the cluster as inter-pod rules see them (nodes.pod_infos)."""
    current = snapshot
    seen = list(pods)
    decisions: list[Decision] = []
    elapsed = 0.0
    for job in jobs:
        request = GangRequest.from_job(job)
        t0 = time.perf_counter()
        decision = decide(current, request, seen)
        elapsed += time.perf_counter() - t0
        decisions.append(decision)
        current = taken(current, decision)
        seen.extend(placed_pods(decision))
    return PlanResult(tuple(decisions), snapshot, current, elapsed)


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
    return {
        "jobs": [decision_json(d) for d in result.decisions],
        "solveSeconds": round(result.solve_seconds, 6),
    }
