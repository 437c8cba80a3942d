"""`railyard plan` for the workloads Railyard places without owning them (docs/workloads.md): a JobSet, a
LeaderWorkerSet or an indexed batch Job whose pod template opted in is read as the TrainingJobs the operator keeps
for its gangs — a JobSet and a Job are one gang, an LWS one gang per group — so the offline plan places them as
the operator would. A workload that did not opt in is not Railyard's to place: it is left out, and said so. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from railyard.topology.cluster.labels import SCHEDULING_GATE
from railyard.topology.cluster.workload_groups import jobset_offsets
from railyard.topology.cluster.workload_intent import OPT_IN_LABEL, OPT_IN_VALUE, placement_spec, tier_intent

WORKLOAD_KINDS = ("JobSet", "LeaderWorkerSet", "Job")


def opted_in(template: Mapping[str, Any]) -> bool:
    """A pod template Railyard places: the opt-in label, or Railyard's gate written in it."""
    labels = (template.get("metadata") or {}).get("labels") or {}
    gates = (template.get("spec") or {}).get("schedulingGates") or []
    return labels.get(OPT_IN_LABEL) == OPT_IN_VALUE or any(g.get("name") == SCHEDULING_GATE for g in gates)


def _templates(obj: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], list[tuple[str, int]]]:
    """The workload's pod templates, and its gangs (name, size)."""
    name, spec = obj["metadata"]["name"], obj.get("spec") or {}
    if obj["kind"] == "JobSet":
        jobs = spec.get("replicatedJobs") or []
        size, _ = jobset_offsets(obj)
        return [((j.get("template") or {}).get("spec") or {}).get("template") or {} for j in jobs], [(name, size)]
    if obj["kind"] == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        templates = [t for t in (lwt.get("workerTemplate"), lwt.get("leaderTemplate")) if t]
        replicas = spec.get("replicas")
        size, groups = int(lwt.get("size") or 1), int(replicas) if replicas is not None else 1
        return templates, [(f"{name}-{g}", size) for g in range(groups)]
    parallelism = spec.get("parallelism")
    return [spec.get("template") or {}], [(name, int(parallelism) if parallelism is not None else 1)]


def as_trainingjobs(objects: Iterable[dict[str, Any]],
                    tier_of_label: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every object, the workloads among them replaced by their gangs' TrainingJobs; and a note for each workload
    left out (it did not opt in)."""
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    for obj in objects:
        if obj.get("kind") not in WORKLOAD_KINDS or not isinstance(obj.get("metadata"), dict) or \
                not obj["metadata"].get("name"):
            out.append(obj)  # TrainingJobs, and what the strict reader will name as wrong
            continue
        templates, gangs = _templates(obj)
        if not templates or not all(opted_in(t) for t in templates):
            notes.append(f"{obj['kind']} {obj['metadata']['name']}: its pod template does not opt in "
                         f"({OPT_IN_LABEL}: {OPT_IN_VALUE}); Railyard does not place it")
            continue
        template = templates[0]
        pod_spec = template.get("spec") or {}
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        for gang, size in gangs:
            body: dict[str, Any] = {
                "apiVersion": "railyard.dev/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": gang, **({"namespace": obj["metadata"]["namespace"]}
                                               if obj["metadata"].get("namespace") else {})},
                "spec": {"replicas": size, "topology": tier_intent(annotations, tier_of_label),
                         "template": {"spec": placement_spec(pod_spec)}}}
            if pod_spec.get("priorityClassName"):
                body["spec"]["priorityClassName"] = pod_spec["priorityClassName"]
            out.append(body)
    return out, notes
