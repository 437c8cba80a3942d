"""Which pods' GPU claims Railyard believes. A Railyard pod names its GPUs (annotation
`railyard.dev/gpus`) and its node (a pin) before kube-scheduler binds it, so its GPUs are held from
the moment it exists. Anyone who can create a pod can write the same annotation and pin, so that
claim is believed only for a pod owned (controller ownerReference) by a TrainingJob whose recorded
placement names it; every other pod holds what kube-scheduler would count: its requests, once bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from railyard.topology.api.status import PlacementStatus, RankPlacement
from railyard.topology.cluster.nodes import Trust


def of_job(pod: str, job_name: str) -> bool:
    """Whether `pod` is a name `pod_name` gives the job's ranks (any placement's)."""
    rest = pod[len(job_name):] if pod.startswith(job_name) else ""
    if rest.startswith(".p"):
        serial, _, rest = rest[2:].partition("-")
        if not serial.isdigit():
            return False
        rest = "-" + rest
    return rest.startswith("-") and rest[1:].isdigit()


def pod_name(job_name: str, rank: int, serial: int = 0) -> str:
    """`<job>-<rank>` for the job's first placement, `<job>.p<serial>-<rank>` for every later one (a
    restart, a re-placement): a pod stuck Terminating never blocks its successor's name, and job names
    hold no dots, so no pod of one job can take the name of another job's. Hostnames stay `<job>-<rank>`."""
    return f"{job_name}-{rank}" if serial == 0 else f"{job_name}.p{serial}-{rank}"


def carried_pod_names(job_name: str, placement: PlacementStatus) -> set[str]:
    """The pods an in-place restart kept into this placement: Railyard's own (no owner's uid) and named for an
    earlier placement. They are this placement's from the moment it is recorded, before (and whether or not) the
    operator relabels them with it: a 1,024-rank gang's relabelling takes seconds the restart need not wait for."""
    return {r.pod or "" for r in placement.ranks if is_carried(job_name, placement, r)}


def is_carried(job_name: str, placement: PlacementStatus, rank: RankPlacement) -> bool:
    return bool(rank.pod) and rank.pod_uid is None and rank.pod != pod_name(job_name, rank.rank, placement.serial)


def placement_pod_names(job_name: str, placement: PlacementStatus) -> set[str]:
    return {r.pod or pod_name(job_name, r.rank, placement.serial) for r in placement.ranks}


def controller_uid(pod: Mapping[str, Any]) -> str | None:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((o.get("uid") for o in owners if o.get("controller")), None)


def placement_claims(jobs: Iterable[Mapping[str, Any]]) -> frozenset[tuple[str, str, str]]:
    """(namespace, pod name, owning job's uid) for every rank a TrainingJob's placement names."""
    out: set[tuple[str, str, str]] = set()
    for job in jobs:
        meta = job.get("metadata") or {}
        raw = (job.get("status") or {}).get("placement")
        if not raw or not meta.get("uid"):
            continue
        try:
            placement = PlacementStatus.model_validate(raw)
        except ValidationError:
            continue  # an unreadable placement claims nothing
        out.update((meta.get("namespace") or "", name, meta["uid"])
                   for name in placement_pod_names(meta.get("name") or "", placement))
    return frozenset(out)


def trust_placements(jobs: Iterable[Mapping[str, Any]]) -> Trust:
    """The rule for pod objects read from the API (the CLI): believe only what a placement names."""
    claims = placement_claims(jobs)

    def trusted(pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        owner = controller_uid(pod)
        return owner is not None and (meta.get("namespace") or "", meta.get("name") or "", owner) in claims

    return trusted
