"""`railyard plan`'s order: the operator's queue order, not the file's. Jobs with a recorded placement run
there already and go first (they hold their GPUs); then the waiting jobs by priority (their PriorityClass's
value, resolved as the operator does), then age (creationTimestamp), then file order. A job naming a class
that is not given nor in the cluster waits, as in the cluster (PriorityClassNotFound), and is listed last."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from railyard.operator.decide.priority import PriorityClassView, missing_message, resolve
from railyard.topology.api.job import TrainingJob
from railyard.topology.cluster.labels import LabelScheme
from railyard.topology.cluster.nodes import DEVICE_KINDS, Trust, build_snapshot
from railyard.topology.planner.plan import PlanResult, plan
from railyard.topology.solver.decision import pod_infos
from railyard.topology.solver.placement import Decision
from railyard.topology.solver.request import GangRequest

_NEVER = datetime.max.replace(tzinfo=UTC)


def queue_order(jobs: Sequence[TrainingJob], classes: Mapping[str, PriorityClassView]
                ) -> tuple[list[TrainingJob], list[TrainingJob]]:
    """(the jobs in the order the operator would place them, the jobs whose PriorityClass is missing)."""
    running = [j for j in jobs if j.status is not None and j.status.placement is not None and j.status.placement.ranks]
    ranked: list[tuple[int, datetime, int, TrainingJob]] = []
    missing: list[TrainingJob] = []
    for index, job in enumerate(jobs):
        if any(job is r for r in running):
            continue
        priority = resolve(job.spec.priority_class_name, classes)
        if priority is None:
            missing.append(job)
            continue
        ranked.append((-priority.value, job.metadata.creation_timestamp or _NEVER, index, job))
    ranked.sort(key=lambda t: t[:3])
    return [*running, *(t[3] for t in ranked)], missing


def plan_in_queue_order(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], trusted: Trust,
                        scheme: LabelScheme, jobs: Sequence[TrainingJob], classes: Sequence[Mapping[str, Any]],
                        defragment: bool) -> PlanResult:
    views = {v.name: v for v in map(PriorityClassView.of, classes)}
    ordered, missing = queue_order(jobs, views)
    devices = [o for o in [*nodes, *pods] if o.get("kind") in DEVICE_KINDS]
    nodes = [o for o in nodes if o.get("kind") not in DEVICE_KINDS]
    pods = [o for o in pods if o.get("kind") not in DEVICE_KINDS]
    result = plan(build_snapshot(nodes, pods, scheme, trusted, devices), ordered, pod_infos(pods, trusted),
                  defragment)
    waiting = tuple(Decision(GangRequest.from_job(job), None, missing_message(job.spec.priority_class_name or ""))
                    for job in missing)
    migrations = (*(result.migrations or (None,) * len(result.decisions)), *(None for _ in waiting))
    return PlanResult((*result.decisions, *waiting), result.before, result.after, result.solve_seconds, migrations)
