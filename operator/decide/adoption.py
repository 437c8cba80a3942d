"""The TrainingJob Railyard keeps for a gang of pods it places without owning them (a JobSet, a LeaderWorkerSet
group, an indexed Job, a pod group): built from the gang's pods once its size is known. Through it the gang is
queued, placed, preempted, reserved for and shown like any TrainingJob (`kubectl get tj`, `railyard status`);
`spec.adopt` says whose pods they are; its topology intent is its pods' (topology/cluster/workload_intent.py).
Pure: act/adoption.py reads the owners and creates it."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from railyard.operator.base.keys import (
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT_ID,
    LABEL_JOB,
    LABEL_RANK,
    LABEL_RESTART,
)
from railyard.operator.decide.builders import pin_to
from railyard.topology.api.job import MAX_TIME_LIMIT_SECONDS
from railyard.topology.cluster.workload_groups import GroupMember
from railyard.topology.cluster.workload_intent import TIME_LIMIT, placement_spec, tier_intent

ADOPTED_KIND = "railyard.dev/adopted-kind"  # label on the TrainingJob: what it places (JobSet, ...)
ADOPTED_NAME = "railyard.dev/adopted-name"


def adopted_name(member: GroupMember) -> str:
    """A stable DNS label for the gang's TrainingJob: the workload's name and a digest of the gang's key (a
    new JobSet attempt is a new gang, so a new TrainingJob)."""
    digest = hashlib.sha1(member.group.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9-]", "-", member.name.lower()).strip("-")[:54] or "gang"
    return f"{base}-{digest}"


def adopted_job(member: GroupMember, size: int, pod: Mapping[str, Any], namespace: str,
                tier_of_label: Mapping[str, str]) -> dict[str, Any]:
    """The TrainingJob body for the gang `member` belongs to (`pod`: one of its pods, for the template)."""
    meta = pod.get("metadata") or {}
    spec = placement_spec(pod.get("spec") or {})
    if (meta.get("annotations") or {}).get(ANNOTATION_PLACEMENT_ID):  # placed by Railyard before
        spec = unpinned(spec)
    body: dict[str, Any] = {
        "apiVersion": "railyard.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": adopted_name(member), "namespace": namespace,
                     "labels": {ADOPTED_KIND: str(member.kind), ADOPTED_NAME: member.name[:63]}},
        "spec": {"replicas": size, "topology": tier_intent(meta.get("annotations") or {}, tier_of_label),
                 "template": {"spec": spec},
                 "adopt": {"kind": str(member.kind), "name": member.name, "group": member.group}},
    }
    if member.owner is not None and member.owner.uid:
        # Gone with the workload (the garbage collector); never blocks its deletion.
        body["metadata"]["ownerReferences"] = [{
            "apiVersion": member.owner.api_version, "kind": member.owner.kind, "name": member.owner.name,
            "uid": member.owner.uid, "blockOwnerDeletion": False}]
    if (limit := time_limit(meta.get("annotations") or {}, pod.get("spec") or {})) is not None:
        body["spec"]["timeLimitSeconds"] = limit
    if (pod.get("spec") or {}).get("priorityClassName"):
        body["spec"]["priorityClassName"] = pod["spec"]["priorityClassName"]
    return body


def unpinned(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` without the node pin Railyard added to it (builders.pin_to: the same `metadata.name In [node]` field
    last in every required term), as its owner wrote it: a gang adopted from pods Railyard placed already (its
    TrainingJob made again) must not take one pod's node for every replica's. Anything else is the owner's."""
    affinity = spec.get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    pins = [(t.get("matchFields") or [None])[-1] for t in terms]
    pin = pins[0] if pins else None
    if not isinstance(pin, dict) or pin.get("key") != "metadata.name" or pin.get("operator") != "In" or \
            len(pin.get("values") or []) != 1 or any(p != pin for p in pins):
        return spec
    kept = []
    for term in terms:
        fields = term["matchFields"][:-1]
        kept.append({k: v for k, v in term.items() if k != "matchFields"} | ({"matchFields": fields} if fields else {}))
    if all(not t for t in kept):  # only Railyard's pin was there
        node_affinity = {k: v for k, v in affinity["nodeAffinity"].items()
                         if k != "requiredDuringSchedulingIgnoredDuringExecution"}
        rest = {k: v for k, v in affinity.items() if k != "nodeAffinity"} | (
            {"nodeAffinity": node_affinity} if node_affinity else {})
        return {k: v for k, v in spec.items() if k != "affinity"} | ({"affinity": rest} if rest else {})
    required["nodeSelectorTerms"] = kept
    return spec


def ranked(members: Mapping[str, GroupMember], offsets: Mapping[int, int] | None = None) -> list[str] | None:
    """The gang's pod names in rank order, or None while the ranks are not a permutation of 0..size-1 (a member
    missing, two claiming one rank). A JobSet pod's rank is its Job's offset (`offsets`, by the Job's global
    index) plus its completion index; pods without a rank are ranked by name."""
    ranks: dict[int, str] = {}
    unranked: list[str] = []
    for name, m in sorted(members.items()):
        rank = m.rank
        if m.job_index is not None and rank is not None:
            if offsets is None or m.job_index not in offsets:
                return None
            rank = offsets[m.job_index] + rank
        if rank is None:
            unranked.append(name)
        elif rank in ranks:
            return None
        else:
            ranks[rank] = name
    for name in unranked:  # by name, into the ranks left free
        free = next(r for r in range(len(ranks) + len(unranked)) if r not in ranks)
        ranks[free] = name
    if sorted(ranks) != list(range(len(ranks))):
        return None
    return [ranks[r] for r in range(len(ranks))]


def pin_patch(pod: Mapping[str, Any], job_name: str, rank: int, restart_count: int, node: str, gpus: Sequence[int],
              placement_id: str, active_deadline: int | None = None) -> dict[str, Any]:
    """The merge patch that makes an adopted gang's gated pod one of the placement's: pinned to its node (node
    affinity narrowed, as a gated pod allows), its GPUs and placement named as a TrainingJob's pods name them,
    labelled with its job and rank (so it is found, counted and shown like one). `active_deadline`: the seconds
    left of the gang's time limit, set as the pod's activeDeadlineSeconds (a field the API lets be set or
    lowered, never raised): the kubelet ends the pod then, so the owner's own failure policy sees it end."""
    spec = copy.deepcopy(dict(pod.get("spec") or {}))
    pin_to(spec, node)
    fields: dict[str, Any] = {"affinity": spec["affinity"]}
    if active_deadline is not None:
        fields["activeDeadlineSeconds"] = max(1, active_deadline)
    return {"metadata": {"labels": {LABEL_JOB: job_name, LABEL_RANK: str(rank), LABEL_RESTART: str(restart_count)},
                         "annotations": {ANNOTATION_GPUS: ",".join(map(str, gpus)),
                                         ANNOTATION_PLACEMENT_ID: placement_id}},
            "spec": fields}


def time_limit(annotations: Mapping[str, str], pod_spec: Mapping[str, Any]) -> int | None:
    """An adopted gang's declared run time: the annotation TIME_LIMIT, or the pods' own activeDeadlineSeconds
    (the kubelet's limit), the smaller. A bad annotation is refused naming it (the gang is not adopted)."""
    limits: list[int] = []
    raw = annotations.get(TIME_LIMIT)
    if raw is not None:
        if not raw.strip().isdigit() or not 1 <= int(raw) <= MAX_TIME_LIMIT_SECONDS:
            raise ValueError(f"annotation {TIME_LIMIT}={raw!r}: must be a whole number of seconds from 1 to "
                             f"{MAX_TIME_LIMIT_SECONDS}")
        limits.append(int(raw))
    own = pod_spec.get("activeDeadlineSeconds")
    if isinstance(own, int) and not isinstance(own, bool) and 1 <= own <= MAX_TIME_LIMIT_SECONDS:
        limits.append(own)
    return min(limits) if limits else None
