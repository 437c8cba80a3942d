"""Synthetic clusters, background occupancy and job streams (seeded, reproducible)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import yaml
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.node_usage import NodeUsage
from railyard.topology.cluster.nodes import build_snapshot
from railyard.topology.planner.profile import ClusterProfile, node_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "clusters"
# Background pods: mostly whole nodes, some partial, as on a shared training cluster.
BACKGROUND_SIZES = (8, 8, 8, 8, 8, 4, 4, 2, 1)
# What a training pod asks of a node per GPU besides the GPU (milli-units), background pods and
# benchmark gangs alike: the solver then counts cpu, memory and pod slots as it does in the operator.
PER_GPU_REQUESTS = {"cpu": 12_000, "memory": 160 * (1 << 30) * 1000, "pods": 1000}


def requests_for(gpus: int, pods: int = 1) -> dict[str, int]:
    """What `pods` pods holding `gpus` GPUs in all request of their node besides the GPUs."""
    return {"cpu": PER_GPU_REQUESTS["cpu"] * gpus, "memory": PER_GPU_REQUESTS["memory"] * gpus,
            "pods": PER_GPU_REQUESTS["pods"] * pods}


def profile_snapshot(name: str) -> Snapshot:
    data = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    return build_snapshot(node_objects(ClusterProfile.model_validate(data), kwok=False))


def occupy(snapshot: Snapshot, fraction: float, rng: random.Random) -> Snapshot:
    """Fill about `fraction` of the GPUs with background pods at random nodes (lowest free indices)."""
    target = int(snapshot.total_gpus * fraction)
    used: dict[str, set[int]] = {}
    pods: dict[str, int] = {}
    filled = 0
    nodes = list(snapshot.nodes)
    while filled < target:
        node = rng.choice(nodes)
        size = rng.choice(BACKGROUND_SIZES)
        taken = used.setdefault(node.name, set())
        free = [g for g in range(node.gpu_count) if g not in taken]
        if len(free) < size:
            continue
        taken.update(free[:size])
        pods[node.name] = pods.get(node.name, 0) + 1
        filled += size
    return _as_the_operator_has_it(snapshot, {k: frozenset(v) for k, v in used.items()},
                                   {k: requests_for(len(used[k]), n) for k, n in pods.items()})


def fragment(snapshot: Snapshot, rng: random.Random) -> Snapshot:
    """Every node with a random number of its GPUs busy (0 to all, uniformly: ~50 % overall), at
    random indices: a cluster after weeks of small jobs, harsher than `occupy`'s mostly whole nodes."""
    used = {}
    for node in snapshot.nodes:
        busy = rng.randint(0, node.gpu_count)
        if busy:
            used[node.name] = frozenset(rng.sample(range(node.gpu_count), busy))
    requested = {name: requests_for(len(gpus), len(gpus)) for name, gpus in used.items()}  # 1-GPU pods
    return _as_the_operator_has_it(snapshot, used, requested)


def _as_the_operator_has_it(base: Snapshot, used: dict[str, frozenset[int]],
                            requested: dict[str, dict[str, int]]) -> Snapshot:
    """A snapshot of `base`'s nodes with this usage, carrying it as arrays as the operator's snapshots
    do (its cache keeps them current pod by pod: operator/cache/snapshot_usage.py), so a timed solve
    costs what it costs in the operator."""
    return Snapshot(base.nodes, used, base.excluded, requested, base.levels, base.memo,
                    NodeUsage.of(base.nodes, used, requested))


@dataclass(frozen=True)
class StreamJob:
    index: int
    replicas: int
    gpus: int
    lifetime: int  # in jobs: the job ends when this many later jobs have arrived


# (replicas, GPUs per replica, weight)
STREAM_MIX = ((1, 1, 6), (1, 2, 4), (2, 4, 6), (1, 8, 10), (2, 8, 12), (4, 8, 14), (8, 8, 14),
              (16, 8, 12), (32, 8, 10), (64, 8, 8), (128, 8, 4))


def job_stream(count: int, rng: random.Random) -> list[StreamJob]:
    shapes = [(r, g) for r, g, _ in STREAM_MIX]
    weights = [w for _, _, w in STREAM_MIX]
    jobs = []
    for i in range(count):
        replicas, gpus = rng.choices(shapes, weights)[0]
        jobs.append(StreamJob(i, replicas, gpus, rng.randint(5, 60)))
    return jobs
