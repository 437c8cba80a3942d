"""Which gang a pod of a workload Railyard does not own belongs to, read from the pod alone: its group, its rank in
the group and, where the pod says, the group's size. Railyard places such a pod only when it opted in (it carries
Railyard's scheduling gate: its template, or the pod webhook for the label `railyard.dev/scheduling: gang`).

How each kind says it (docs/workloads.md):
- explicit: label `railyard.dev/pod-group` (the group's name), `railyard.dev/pod-group-size` (label or annotation),
  optionally `railyard.dev/pod-group-rank`; Kueue's pod-group keys are read the same way;
- JobSet (and Kubeflow TrainJob, which runs one): the whole JobSet attempt is one gang (`jobset-uid`,
  `restart-attempt`); rank = the pod's Job's offset + `batch.kubernetes.io/job-completion-index` (the offsets come
  from the JobSet's spec: the size is not on the pod);
- LeaderWorkerSet: one group (`group-key`), rank `worker-index` (0: the leader), size from the `size` annotation;
- an indexed Job: the Job (`controller-uid`), rank the completion index; its size is the Job's parallelism;
- a native PodGroup (`spec.schedulingGroup.podGroupName`): size from the PodGroup's gang minCount.
Pure: no API reads. What the pod cannot say (a JobSet's or Job's size) an actor reads from the owner once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

GROUP_LABEL = "railyard.dev/pod-group"
GROUP_SIZE = "railyard.dev/pod-group-size"
GROUP_RANK = "railyard.dev/pod-group-rank"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_SIZE = "kueue.x-k8s.io/pod-group-total-count"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-global-index"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
JOB_NAME = "batch.kubernetes.io/job-name"
JOB_UID = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"  # Kubeflow Training Operator v1 (PyTorchJob)
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
PYTORCH_REPLICA_TYPES = ("master", "worker")  # in rank order: the master is rank 0


class WorkloadKind(StrEnum):
    """What a gang of pods Railyard does not own comes from."""

    POD_GROUP = "PodGroup"  # labelled pods (Railyard's or Kueue's keys), or a native scheduling.k8s.io PodGroup
    JOBSET = "JobSet"
    LEADER_WORKER_SET = "LeaderWorkerSet"
    JOB = "Job"
    PYTORCH_JOB = "PyTorchJob"


@dataclass(frozen=True)
class Owner:
    """The object whose spec says what the pod cannot (its size), and that the gang's record is owned by."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class GroupMember:
    """One pod's place in its gang."""

    group: str  # unique in the namespace, across attempts: a new attempt (JobSet restart) is a new group
    name: str  # what users call the workload (its name; an LWS group: `<lws>-<group index>`)
    kind: WorkloadKind
    rank: int | None  # None: ranked by pod name
    size: int | None  # None: the owner says (a JobSet's or Job's spec, a PodGroup)
    owner: Owner | None
    job: str | None = None  # a JobSet pod's Job (its rank is that Job's offset + the completion index)
    job_index: int | None = None  # a JobSet pod's Job's global index; a PyTorchJob pod's replica type's place


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _owner(meta: Mapping[str, Any]) -> Owner | None:
    for o in meta.get("ownerReferences") or []:
        if o.get("controller"):
            return Owner(str(o.get("apiVersion") or ""), str(o.get("kind") or ""), str(o.get("name") or ""),
                         str(o.get("uid") or ""))
    return None


def member_of(pod: Mapping[str, Any]) -> GroupMember | None:
    """The gang this pod belongs to, as the pod says (None: no gang Railyard can tell)."""
    meta = pod.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    owner = _owner(meta)
    group = labels.get(GROUP_LABEL) or labels.get(KUEUE_GROUP)
    if group:
        size = _int(labels.get(GROUP_SIZE) or annotations.get(GROUP_SIZE) or annotations.get(KUEUE_SIZE)
                    or labels.get(KUEUE_SIZE))
        rank = _int(labels.get(GROUP_RANK) or annotations.get(GROUP_RANK) or labels.get(COMPLETION_INDEX)
                    or labels.get(LWS_WORKER_INDEX))
        return GroupMember(f"pods/{group}", group, WorkloadKind.POD_GROUP, rank, size, owner)
    if labels.get(JOBSET_UID):
        attempt = labels.get(JOBSET_ATTEMPT) or "0"
        name = labels.get(JOBSET_NAME) or ""
        return GroupMember(f"jobset/{labels[JOBSET_UID]}/{attempt}", name, WorkloadKind.JOBSET,
                           _int(labels.get(COMPLETION_INDEX)), None,
                           Owner("jobset.x-k8s.io/v1alpha2", "JobSet", name, labels[JOBSET_UID]),
                           labels.get(JOB_NAME), _int(labels.get(JOBSET_JOB_INDEX)))
    if labels.get(LWS_GROUP_KEY) or labels.get(LWS_NAME):
        lws, index = labels.get(LWS_NAME) or "", labels.get(LWS_GROUP_INDEX) or "0"
        key = labels.get(LWS_GROUP_KEY) or f"{lws}-{index}"
        return GroupMember(f"lws/{key}", f"{lws}-{index}", WorkloadKind.LEADER_WORKER_SET,
                           _int(labels.get(LWS_WORKER_INDEX)) or 0, _int(annotations.get(LWS_SIZE)), owner)
    replica_type = (labels.get(KUBEFLOW_REPLICA_TYPE) or "").lower()
    if labels.get(KUBEFLOW_JOB_NAME) and owner is not None and owner.kind == "PyTorchJob" and \
            replica_type in PYTORCH_REPLICA_TYPES:
        return GroupMember(f"pytorchjob/{owner.uid}", owner.name, WorkloadKind.PYTORCH_JOB,
                           _int(labels.get(KUBEFLOW_REPLICA_INDEX)), None, owner, replica_type,
                           PYTORCH_REPLICA_TYPES.index(replica_type))
    group_name = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if group_name:
        return GroupMember(f"podgroup/{group_name}", group_name, WorkloadKind.POD_GROUP,
                           _int(labels.get(COMPLETION_INDEX)), None,
                           Owner("scheduling.k8s.io/v1alpha2", "PodGroup", group_name, ""))
    if labels.get(JOB_UID) and labels.get(COMPLETION_INDEX) is not None:
        job = labels.get(JOB_NAME) or ""
        return GroupMember(f"job/{labels[JOB_UID]}", job, WorkloadKind.JOB, _int(labels.get(COMPLETION_INDEX)),
                           None, owner)
    return None


def jobset_offsets(jobset: Mapping[str, Any]) -> tuple[int, dict[int, int]]:
    """A JobSet's size (pods) and each Job's first rank, by the Job's global index: replicated jobs in order,
    each `replicas` Jobs of `parallelism` pods."""
    offsets: dict[int, int] = {}
    rank = index = 0
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        spec = ((rjob.get("template") or {}).get("spec") or {})
        parallelism = int(spec.get("parallelism") or 0) if spec.get("parallelism") is not None else 1
        replicas = int(rjob.get("replicas") or 0) if rjob.get("replicas") is not None else 1
        for _ in range(replicas):
            offsets[index] = rank
            rank += parallelism
            index += 1
    return rank, offsets


def pytorchjob_offsets(job: Mapping[str, Any]) -> tuple[int, dict[int, int]]:
    """A PyTorchJob's size (its Master and Worker replicas) and each replica type's first rank: the master is
    rank 0, the workers follow by replica index (the ranks torchrun gives them)."""
    specs = {k.lower(): v for k, v in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items()}
    offsets: dict[int, int] = {}
    rank = 0
    for index, kind in enumerate(PYTORCH_REPLICA_TYPES):
        offsets[index] = rank
        replicas = (specs.get(kind) or {}).get("replicas")
        rank += int(replicas) if replicas is not None else (1 if kind in specs else 0)
    return rank, offsets
