"""What the solver is asked to place: a gang of identical replicas with topology constraints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from railyard.topology.api.job import Parallelism, TrainingJob
from railyard.topology.cluster.alignment import RailAlignment
from railyard.topology.cluster.labels import GPU_RESOURCE, LABEL_JOB, LABEL_POD_GROUP
from railyard.topology.cluster.resources import pod_requests
from railyard.topology.solver.commgraph import ModelHints


def job_pod_labels(job_name: str, template: Mapping[str, Any]) -> dict[str, str]:
    """The labels every replica pod of the job carries (the rank-independent part)."""
    labels = (template.get("metadata") or {}).get("labels") or {}
    return {**labels, LABEL_JOB: job_name, LABEL_POD_GROUP: job_name}


@dataclass(frozen=True)
class GangRequest:
    name: str
    replicas: int
    gpus_per_replica: int
    namespace: str = "default"
    min_replicas: int | None = None
    required_tier: str | None = None  # a level name (levels.py)
    preferred_tier: str | None = None
    rail_alignment: RailAlignment = RailAlignment.PREFERRED
    parallelism: Parallelism | None = None
    model: ModelHints | None = None  # traffic-model sizes for rank mapping (commgraph.py)
    pod_spec: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # Per-replica requests of every resource but GPUs (milli-units, `pods` included); see resources.py.
    resources: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)
    # The labels its pods carry (inter-pod rules of this gang and of others match them).
    pod_labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def smallest(self) -> int:
        return self.min_replicas if self.min_replicas is not None else self.replicas

    @classmethod
    def from_job(cls, job: TrainingJob) -> GangRequest:
        spec = job.spec
        return cls(
            name=job.metadata.name,
            namespace=job.metadata.namespace,
            replicas=spec.replicas,
            min_replicas=spec.effective_min_replicas,
            gpus_per_replica=spec.gpus_per_replica,
            required_tier=spec.topology.required_tier,
            preferred_tier=spec.topology.preferred_tier,
            rail_alignment=spec.topology.rail_alignment,
            parallelism=spec.parallelism,
            model=spec.model.hints() if spec.model is not None else None,
            pod_spec=spec.pod_spec,
            resources={k: v for k, v in pod_requests(spec.pod_spec).items() if k != GPU_RESOURCE},
            pod_labels=job_pod_labels(job.metadata.name, spec.template),
        )
