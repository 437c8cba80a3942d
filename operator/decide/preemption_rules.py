"""Pure rules of gang preemption around the victim chooser (topology/solver/victims.py): what evicting a
gang costs, the hourly cap, and the words its conditions and Events use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from railyard.operator.base.objects import Key
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
