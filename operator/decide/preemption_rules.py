"""Pure rules of gang preemption around the victim chooser (topology/solver/victims.py): what evicting a
gang costs, the hourly cap, when a marked victim is let go on, what an elastic victim keeps, and the words
its conditions and Events use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from railyard.operator.base.objects import Job, Key
from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.solver.victims import WHOLE_CLUSTER, PreemptionPlan

HOUR = 3600.0


def lost_gpu_seconds(gpus: int, last_saved: float | None, now: float) -> float:
    """The work evicting a gang now throws away: its GPUs x the seconds since it last saved (unknown:
    nothing is known lost, so 0)."""
    return gpus * max(0.0, now - last_saved) if last_saved is not None else 0.0


def recent_preemptions(times: Sequence[datetime], now: float) -> list[datetime]:
    return [t for t in times if now - t.timestamp() < HOUR]


def parse_key(text: str) -> Key:
    namespace, _, name = text.partition("/")
    return (namespace, name)


def describe_plan(plan: PreemptionPlan) -> str:
    where = "the cluster" if plan.domain == WHOLE_CLUSTER else f"{plan.level} {plan.domain}"
    victims = ", ".join(f"{v.key} (priority {v.priority}, {v.gpus} GPUs"
                        f"{f', shrunk to {v.shrink_to} replicas' if v.shrink_to is not None else ''})"
                        for v in plan.victims)
    return f"{victims} from {where}: {plan.lost_gpu_hours:.2f} GPU-hours since their last checkpoints"


def victim_message(preemptor: str, summary: str, grace: float, shrink_to: int | None = None) -> str:
    then = f"it is shrunk to {shrink_to} replicas and runs on" if shrink_to is not None else "it is requeued"
    return (f"preempted by {preemptor} (higher priority): {summary}; its ranks save a step first (at most "
            f"{grace:.0f}s), then {then}")


def shrink_sizes(current: int, at_least: int, valid: Callable[[int], bool]) -> tuple[int, ...]:
    """The sizes below `current` an elastic gang may be shrunk to (>= minReplicas, valid for its
    parallelism); empty for a gang that is not elastic."""
    return tuple(n for n in range(at_least, current) if valid(n))


def cancelled(preemptor: Job | None, preemptor_holds: bool) -> str | None:
    """Why a marked victim is let go on — its preemptor no longer needs the room (gone, finished, or placed
    without a hold on this room) — or None: the preemption goes on."""
    if preemptor is None or preemptor.deleting:
        return "it is gone"
    if preemptor.finished or (preemptor.placement is not None and not preemptor_holds):
        return "it was placed without this job's room"
    return None


def shrink_kept(job: Job, size: int, dropping: set[int], snapshot: Snapshot
                ) -> list[tuple[GpuNode, tuple[int, ...]]] | None:
    """What an elastic victim keeps when shrunk to `size` dropping the ranks the plan chose, in rank order;
    None when that no longer makes sense (its placement changed, or a kept rank's node is gone or unusable):
    then it is evicted whole."""
    if job.placement is None:
        return None
    kept = [(r.node, tuple(r.gpus)) for r in sorted(job.placement.ranks, key=lambda r: r.rank)
            if r.rank not in dropping]
    if len(kept) != size or not all(snapshot.has_node(node) for node, _ in kept):
        return None
    return [(snapshot.node(node), gpus) for node, gpus in kept]
