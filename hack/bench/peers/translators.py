"""Side by side with the peers: one job stream translated into each peer's objects, and a
peer-agnostic reader of where the pods landed. Pure (dicts in, dicts out); hack/bench/peers/compare.py runs it.

Peers: Railyard; kube-scheduler 1.36's own gang scheduling with a topology constraint (PodGroup,
scheduling.k8s.io/v1alpha2: one required topology key, no preferred tier); Kueue's Topology Aware
Scheduling (required or preferred topology per pod set); Volcano's network-topology-aware
scheduling (vcjobs over HyperNodes, hard or soft tier limit); and a naive baseline: pods that
require podAffinity to each other on the TOR label (no gang).
"""

from __future__ import annotations

import random
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bench.core.workload import job_stream
from railyard.topology.api.job import GROUP, VERSION
from railyard.topology.cluster.labels import LABEL_LEAF, LABEL_SPINE, LABEL_TOR, SCHEDULING_GATE
from railyard.topology.cluster.workload_intent import (
    OPT_IN_LABEL,
    OPT_IN_VALUE,
    PREFERRED_TIER,
    REQUIRED_TIER,
    TIME_LIMIT,
)

JOB_LABEL = "compare.railyard.dev/job"
INDEX_ANNOTATION = "compare.railyard.dev/index"
IMAGE = "registry.invalid/train:0"
JOB_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
PEERS = ("railyard", "kube-scheduler-gang", "kueue-tas", "volcano", "naive-podaffinity")
KUEUE_QUEUE = "train"
VOLCANO_TIERS = {"tor": 1, "leaf": 2, "spine": 3}  # HyperNode tiers, as volcano_cluster_objects builds them


LIFETIME_ANNOTATION = "railyard.dev/simulate-lifetime"  # hack/kwok-stages: the pod succeeds after it


@dataclass(frozen=True)
class PeerJob:
    name: str
    replicas: int
    gpus: int
    required_tier: str | None  # "tor" | "leaf" | None
    preferred_tier: str | None
    arrival: float = 0.0  # seconds into the run (the living cluster's stream; 0 in the burst)
    lifetime: float | None = None  # seconds each pod runs before it succeeds; None: forever
    # Its declared run time: the Railyard peers' spec.timeLimitSeconds (a JobSet's railyard.dev/time-limit-seconds);
    # the other peers are sent the job without it (none of them schedules by one). None: none.
    time_limit: int | None = None


def stream(count: int, seed: int) -> list[PeerJob]:
    """The benchmark's job mix as one burst, whole-node and partial replicas alike. Gangs of up to 16
    replicas require one TOR (as a TP/PP-heavy job would), larger ones prefer TORs."""
    jobs = []
    for job in job_stream(count, random.Random(seed)):
        required = "tor" if 1 < job.replicas <= 16 else None
        jobs.append(PeerJob(f"j{job.index:03d}-{job.replicas}x{job.gpus}", job.replicas, job.gpus, required,
                            None if required else "tor"))
    return jobs


def _labels(job: PeerJob) -> dict[str, str]:
    return {JOB_LABEL: job.name}


def _annotations(job: PeerJob) -> dict[str, str]:
    """What every peer's pods carry: the lifetime kwok gives them (living-cluster runs only)."""
    return {LIFETIME_ANNOTATION: f"{round(job.lifetime)}s"} if job.lifetime is not None else {}


def _container(job: PeerJob) -> dict[str, Any]:
    return {"name": "train", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": job.gpus}}}


_TIER_LABEL = {"tor": LABEL_TOR, "leaf": LABEL_LEAF, "spine": LABEL_SPINE}


def railyard_objects(job: PeerJob) -> list[dict[str, Any]]:
    topology = {k: v for k, v in (("requiredTier", job.required_tier), ("preferredTier", job.preferred_tier)) if v}
    spec: dict[str, Any] = {"replicas": job.replicas, "topology": topology,
                            "template": {"metadata": {"labels": _labels(job), "annotations": _annotations(job)},
                                         "spec": {"containers": [_container(job)]}}}
    if job.time_limit is not None:
        spec["timeLimitSeconds"] = job.time_limit
    return [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
             "metadata": {"name": job.name, "labels": _labels(job)}, "spec": spec}]


def railyard_jobset_objects(job: PeerJob) -> list[dict[str, Any]]:
    """The same job as a JobSet Railyard places without owning it (docs/workloads.md): one replicated Job of
    `replicas` indexed pods, opted in, its topology as the annotations mirroring `spec.topology`, the gate in the
    template (the chart's pod webhook would add it; the benchmark leaves the webhook's admission call out)."""
    annotations = _annotations(job)
    for key, tier in ((REQUIRED_TIER, job.required_tier), (PREFERRED_TIER, job.preferred_tier)):
        if tier:
            annotations[key] = tier
    if job.time_limit is not None:
        annotations[TIME_LIMIT] = str(job.time_limit)
    pod = {"metadata": {"labels": {**_labels(job), OPT_IN_LABEL: OPT_IN_VALUE}, "annotations": annotations},
           "spec": {"restartPolicy": "Never", "schedulingGates": [{"name": SCHEDULING_GATE}],
                    "containers": [_container(job)]}}
    return [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
             "metadata": {"name": job.name, "labels": _labels(job)},
             "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                 "parallelism": job.replicas, "completions": job.replicas, "completionMode": "Indexed",
                 "backoffLimit": 0, "template": pod}}}]}}]


def _pods(job: PeerJob, pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Bare pods, one per replica, with their index: no Job controller in the way (kwok completes
    Job-owned pods; the peers' schedulers are what is compared)."""
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{job.name}-{i}", "labels": _labels(job),
                          "annotations": {INDEX_ANNOTATION: str(i), **_annotations(job)}},
             "spec": {"restartPolicy": "Never", "containers": [_container(job)], **pod_spec}}
            for i in range(job.replicas)]


def native_gang_objects(job: PeerJob) -> list[dict[str, Any]]:
    """A PodGroup (gang of all replicas; the required tier as its one topology key — a preferred tier
    has no equivalent) and the pods, which name it."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": job.replicas}}}
    if job.required_tier:
        spec["schedulingConstraints"] = {"topology": [{"key": _TIER_LABEL[job.required_tier]}]}
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
             "metadata": {"name": job.name, "labels": _labels(job)}, "spec": spec}
    return [group, *_pods(job, {"schedulingGroup": {"podGroupName": job.name}})]


def naive_objects(job: PeerJob) -> list[dict[str, Any]]:
    """Required podAffinity to the job's own pods on the TOR label, whatever the job asked for (the
    usual hand-written attempt at locality; no gang, so a job can end up partly bound)."""
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": _labels(job)}, "topologyKey": LABEL_TOR}]}}
    return _pods(job, {"affinity": affinity})


def kueue_objects(job: PeerJob) -> list[dict[str, Any]]:
    """An Indexed Job, suspended, in Kueue's queue, with the tier as Kueue TAS's required or preferred
    topology (no webhooks: suspend and the queue label are set here, as the Job webhook would)."""
    annotations = _annotations(job)
    if job.required_tier:
        annotations["kueue.x-k8s.io/podset-required-topology"] = _TIER_LABEL[job.required_tier]
    elif job.preferred_tier:
        annotations["kueue.x-k8s.io/podset-preferred-topology"] = _TIER_LABEL[job.preferred_tier]
    return [{"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": job.name, "labels": {**_labels(job), "kueue.x-k8s.io/queue-name": KUEUE_QUEUE}},
             "spec": {"suspend": True, "parallelism": job.replicas, "completions": job.replicas,
                      "completionMode": "Indexed", "backoffLimit": 0,
                      "template": {"metadata": {"labels": _labels(job), "annotations": annotations},
                                   "spec": {"restartPolicy": "Never", "containers": [_container(job)]}}}}]


def kueue_cluster_objects(gpus: int, namespace: str, topology: bool = True) -> list[dict[str, Any]]:
    """Kueue's side of the fabric: a Topology over spine/leaf/TOR/hostname, one flavor on the kwok
    nodes, and a queue whose quota is `gpus` (with TAS the whole cluster: TAS, not quota, decides placement;
    without, quota alone: Kueue admits, another scheduler places)."""
    group = "kueue.x-k8s.io/v1beta2"
    flavor: dict[str, Any] = {"nodeLabels": {"type": "kwok"}}
    if topology:
        flavor["topologyName"] = "railyard"
    return [
        *([{"apiVersion": group, "kind": "Topology", "metadata": {"name": "railyard"},
            "spec": {"levels": [{"nodeLabel": LABEL_SPINE}, {"nodeLabel": LABEL_LEAF}, {"nodeLabel": LABEL_TOR},
                                {"nodeLabel": "kubernetes.io/hostname"}]}}] if topology else []),
        {"apiVersion": group, "kind": "ResourceFlavor", "metadata": {"name": "gpu"}, "spec": flavor},
        {"apiVersion": group, "kind": "ClusterQueue", "metadata": {"name": "gpus"},
         "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                  "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                      {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}},
        {"apiVersion": group, "kind": "LocalQueue", "metadata": {"name": KUEUE_QUEUE, "namespace": namespace},
         "spec": {"clusterQueue": "gpus"}},
    ]


def volcano_objects(job: PeerJob) -> list[dict[str, Any]]:
    """A Volcano Job (batch.volcano.sh/v1alpha1): one task, the whole job a gang (minAvailable = all
    replicas), the tier as `networkTopology` — hard for a required tier, soft for a preferred one,
    `highestTierAllowed` the HyperNode tier. No webhooks: what the mutating webhook would default
    (scheduler, queue, minAvailable, maxRetry, task minAvailable) is set here."""
    spec: dict[str, Any] = {
        "schedulerName": "volcano", "queue": "default", "minAvailable": job.replicas, "maxRetry": 0,
        "tasks": [{"name": "worker", "replicas": job.replicas, "minAvailable": job.replicas,
                   "template": {"metadata": {"labels": _labels(job), "annotations": _annotations(job)},
                                "spec": {"restartPolicy": "Never", "containers": [_container(job)]}}}],
    }
    tier = job.required_tier or job.preferred_tier
    if tier:
        spec["networkTopology"] = {"mode": "hard" if job.required_tier else "soft",
                                   "highestTierAllowed": VOLCANO_TIERS[tier]}
    return [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
             "metadata": {"name": job.name, "labels": _labels(job)}, "spec": spec}]


def volcano_cluster_objects(nodes: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """HyperNodes from the nodes' topology labels: a TOR (tier 1) selects its nodes by label, a leaf
    (tier 2) its TORs and a spine (tier 3) its leaves by name (Railyard's ids are unique, DNS-safe)."""
    children: dict[tuple[int, str], set[str]] = defaultdict(set)
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        spine, leaf, tor = labels.get(LABEL_SPINE), labels.get(LABEL_LEAF), labels.get(LABEL_TOR)
        if spine and leaf and tor:
            children.setdefault((1, tor), set())  # a TOR's members are selected by label
            children[(2, leaf)].add(tor)
            children[(3, spine)].add(leaf)
    out = []
    for (tier, name), members in sorted(children.items()):
        if tier == 1:
            selected = [{"type": "Node", "selector": {"labelMatch": {"matchLabels": {LABEL_TOR: name}}}}]
        else:
            selected = [{"type": "HyperNode", "selector": {"exactMatch": {"name": m}}} for m in sorted(members)]
        tier_name = next(t for t, n in VOLCANO_TIERS.items() if n == tier)
        out.append({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
                    "spec": {"tier": tier, "tierName": tier_name, "members": selected}})
    return out


TRANSLATORS = {"railyard": railyard_objects, "kube-scheduler-gang": native_gang_objects,
               "kueue-tas": kueue_objects, "volcano": volcano_objects, "naive-podaffinity": naive_objects,
               "railyard-jobset": railyard_jobset_objects}  # the last not among PEERS: COMPARE_PEERS names it


def _index(pod: Mapping[str, Any]) -> int:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    value = (annotations.get(INDEX_ANNOTATION) or annotations.get(JOB_INDEX_ANNOTATION)
             or (meta.get("labels") or {}).get("railyard.dev/rank"))
    if value is not None:
        return int(value)
    return int(meta.get("name", "0").rsplit("-", 1)[-1]) if meta.get("name", "").rsplit("-", 1)[-1].isdigit() else 0


def read_placements(jobs: Iterable[PeerJob], pods: Iterable[Mapping[str, Any]],
                    nodes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per job, from bound pods only (any scheduler): replicas bound, and the nodes, TORs, leaves and
    spines they span, ring cost in index order (0 same node, 1 TOR, 2 leaf, 3 spine, 4 across)."""
    where = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        where[node["metadata"]["name"]] = (labels.get(LABEL_SPINE), labels.get(LABEL_LEAF), labels.get(LABEL_TOR))
    bound: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for pod in pods:
        meta = pod.get("metadata") or {}
        job = (meta.get("labels") or {}).get(JOB_LABEL)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if job and node_name and not meta.get("deletionTimestamp"):
            bound[job].append((_index(pod), node_name))
    out = {}
    for job in jobs:
        placed = [node for _, node in sorted(bound.get(job.name, []))]
        paths = [where.get(n, (None, None, None)) for n in placed]
        out[job.name] = {
            "replicas": job.replicas, "gpus": job.gpus, "bound": len(placed),
            "nodes": len(set(placed)), "tors": len({p[2] for p in paths}), "leaves": len({p[1] for p in paths}),
            "spines": len({p[0] for p in paths}), "ring_cost": _ring_cost(placed, paths),
        }
    return out


def _ring_cost(nodes: list[str], paths: list[tuple[Any, Any, Any]]) -> int:
    if len(nodes) < 2:
        return 0
    cost = 0
    for i in range(len(nodes)):
        j = (i + 1) % len(nodes)
        if nodes[i] == nodes[j]:
            continue
        a, b = paths[i], paths[j]
        cost += 1 if a[2] == b[2] else 2 if a[1] == b[1] else 3 if a[0] == b[0] else 4
    return cost


def summarise(placements: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One peer's figures over the stream."""
    rows = list(placements.values())
    full = [r for r in rows if r["bound"] == r["replicas"]]
    multi = [r for r in full if r["replicas"] > 1]
    return {
        "jobs": len(rows), "jobs_placed": len(full),
        "gpus_placed": sum(r["replicas"] * r["gpus"] for r in full),
        "partially_bound_gangs": sum(1 for r in rows if 0 < r["bound"] < r["replicas"]),
        "pods_bound_of_partial_gangs": sum(r["bound"] for r in rows if 0 < r["bound"] < r["replicas"]),
        "mean_tors_spanned": round(statistics.fmean(r["tors"] for r in multi), 3) if multi else 0,
        "mean_leaves_spanned": round(statistics.fmean(r["leaves"] for r in multi), 3) if multi else 0,
        "mean_ring_cost": round(statistics.fmean(r["ring_cost"] for r in multi), 3) if multi else 0,
    }


def on_common_jobs(jobs: Iterable[PeerJob], by_peer: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """TORs and ring cost over the multi-replica jobs every peer placed whole: the like-for-like
    comparison (each peer's own means cover different jobs)."""
    common = [j.name for j in jobs
              if j.replicas > 1 and all(p[j.name]["bound"] == j.replicas for p in by_peer.values())]
    out: dict[str, Any] = {"jobs": len(common)}
    for peer, placements in by_peer.items():
        out[peer] = {"mean_tors_spanned": round(statistics.fmean(placements[n]["tors"] for n in common), 3),
                     "mean_ring_cost": round(statistics.fmean(placements[n]["ring_cost"] for n in common), 3)
                     } if common else {}
    return out


_COLUMNS = (("jobs placed", "jobs_placed"), ("GPUs placed", "gpus_placed"),
            ("partial gangs", "partially_bound_gangs"), ("TORs/job", "mean_tors_spanned"),
            ("leaves/job", "mean_leaves_spanned"), ("ring cost", "mean_ring_cost"),
            ("submit→bound p50 s", "bound_p50_seconds"), ("p99 s", "bound_p99_seconds"),
            ("pods/s", "pods_bound_per_second"), ("scheduler CPU s", "scheduler_cpu_seconds"))


def markdown_table(figures: Mapping[str, Mapping[str, Any]]) -> str:
    lines = ["| peer | " + " | ".join(c for c, _ in _COLUMNS) + " |", "|---" * (len(_COLUMNS) + 1) + "|"]
    for peer, row in figures.items():
        lines.append(f"| {peer} | " + " | ".join(str(row.get(k, "n/a")) for _, k in _COLUMNS) + " |")
    return "\n".join(lines)
