"""A job's priority: the value of its PriorityClass (scheduling.k8s.io/v1), an admin's object, as
kube-scheduler resolves a pod's. No class named: the cluster's globalDefault class, else 0. A class
named that does not exist: the job waits (PriorityClassNotFound) until it does, as the Priority
admission plugin would refuse its pods. A placed gang ranks, when others look for room, at the lower of its
class's value now and the value it was placed at (`ranked_priority`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from railyard.operator.base.objects import Job
from railyard.topology.api.job import PreemptionPolicy


@dataclass(frozen=True)
class PriorityClassView:
    name: str
    value: int
    global_default: bool = False
    # Read by preemption, never by the queue. A value this version does not know reads as Never.
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> PriorityClassView:
        raw = body.get("preemptionPolicy") or PreemptionPolicy.PREEMPT_LOWER_PRIORITY
        policy = PreemptionPolicy(raw) if raw in tuple(PreemptionPolicy) else PreemptionPolicy.NEVER
        return cls(name=str(body["metadata"]["name"]), value=int(body.get("value") or 0),
                   global_default=bool(body.get("globalDefault")), preemption_policy=policy)


@dataclass(frozen=True)
class Priority:
    value: int
    class_name: str | None  # the class it came from (None: no class, 0)
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY


def resolve(name: str | None, classes: Mapping[str, PriorityClassView]) -> Priority | None:
    """The priority a job with spec.priorityClassName `name` has; None when that class does not exist."""
    if name:
        found = classes.get(name)
        return Priority(found.value, found.name, found.preemption_policy) if found is not None else None
    defaults = [c for c in classes.values() if c.global_default]
    if not defaults:
        return Priority(0, None)
    chosen = min(defaults, key=lambda c: (-c.value, c.name))  # two defaults: the API allows one; be stable
    return Priority(chosen.value, chosen.name, chosen.preemption_policy)


LOWEST = -2_147_483_648  # the least a PriorityClass value can be (int32)


def ranked_priority(job: Job, classes: Mapping[str, PriorityClassView]) -> int:
    """The priority a placed gang has when others look for room: the lower of its class's value now and the
    value it was placed at (status.placement.priority). A class that does not exist ranks lowest. So renaming
    spec.priorityClassName — to a higher class, or to none that exists — never shields a running gang."""
    current = resolve(job.priority_class_name, classes)
    value = current.value if current is not None else LOWEST
    placed = job.placement.priority if job.placement is not None else None
    return value if placed is None else min(value, placed)


def may_preempt(priority: Priority, own: PreemptionPolicy | None) -> bool:
    """Never on the class or on the job (spec.preemption.policy) wins: the job waits instead."""
    return PreemptionPolicy.NEVER not in (priority.preemption_policy, own)


def missing_message(name: str) -> str:
    return (f"spec.priorityClassName={name!r}: no such PriorityClass (kubectl get priorityclasses); the job "
            "waits until an admin creates it")
