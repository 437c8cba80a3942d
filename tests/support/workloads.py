"""Workloads' pods as their controllers make them, for unit tests against the in-memory API: a JobSet's pods
(labelled, owned by their Job, gated as Railyard's pod webhook gates them) and a pod its owner makes again."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from tests.support.harness import Rig

GATE = {"name": "railyard.dev/gang"}


def jobset_pods(r: Rig, name: str, jobs: int, parallelism: int, gpus: int = 8, priority_class: str | None = None,
                **annotations: str) -> list[str]:
    """A JobSet of `jobs` Jobs of `parallelism` pods each, as its controller and the Job controller make them:
    labelled, owned by their Job, gated by Railyard's gate (the pod webhook's work). Returns the pod names."""
    uid = uuid.uuid4().hex
    r.api.owners[f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/{name}"] = {
        "metadata": {"name": name, "uid": uid},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": jobs,
                                     "template": {"spec": {"parallelism": parallelism}}}]}}
    names = []
    for j in range(jobs):
        job, job_uid = f"{name}-w-{j}", uuid.uuid4().hex
        for i in range(parallelism):
            pod = f"{job}-{i}-{uuid.uuid4().hex[:5]}"
            names.append(pod)
            labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/jobset-uid": uid,
                      "jobset.sigs.k8s.io/restart-attempt": "0", "jobset.sigs.k8s.io/job-global-index": str(j),
                      "batch.kubernetes.io/job-name": job, "batch.kubernetes.io/controller-uid": job_uid,
                      "batch.kubernetes.io/job-completion-index": str(i), "railyard.dev/scheduling": "gang"}
            body: dict[str, Any] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": "default", "labels": labels, "annotations": dict(annotations),
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                                  "uid": job_uid, "controller": True}]},
                "spec": {"restartPolicy": "OnFailure", "schedulingGates": [GATE],
                         **({"priorityClassName": priority_class} if priority_class else {}),
                         "containers": [{"name": "train", "image": "trainer:1",
                                         "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
                "status": {"phase": "Pending"}}
            r.api._store("pods", body, "ADDED")
    r.deliver()
    return names


def fresh_pod(old: dict[str, Any], name: str) -> dict[str, Any]:
    """`old` as its owner makes it again under `name`: a new uid, the same indices, gated by the webhook."""
    pod = copy.deepcopy(old)
    pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k not in ("resourceVersion", "uid")}
    pod["metadata"]["name"] = name
    pod["metadata"]["uid"] = uuid.uuid4().hex
    for key in ("railyard.dev/job-name", "railyard.dev/rank", "railyard.dev/restart-count"):
        pod["metadata"]["labels"].pop(key, None)
    pod["metadata"]["annotations"] = {}
    pod["spec"] = {k: v for k, v in pod["spec"].items() if k not in ("affinity", "nodeName")}
    pod["spec"]["schedulingGates"] = [GATE]
    pod["status"] = {"phase": "Pending"}
    return pod
