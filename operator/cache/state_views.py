"""Views of the cluster state that placement reads: the pods on each node as a template's affinity sees them (live
pods, and the ranks of recorded placements whose pods do not exist yet), what Terminating pods hold until they have
gone (preemption), what holds GPUs on each node and for which job (backfill), and a placement's pods."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from railyard.operator.base.objects import Key, PodView
from railyard.operator.cache.state import ClusterState
from railyard.operator.cache.usage import Holder
from railyard.topology.cluster.affinity import PodInfo
from railyard.topology.cluster.model import GpuNode


def node_models(state: ClusterState) -> dict[str, GpuNode]:
    """Every node's model: usable now, or last seen usable (a lost node's, for distances and rails)."""
    return {**state.last_model, **state.nodes}


def pod_infos(state: ClusterState) -> list[PodInfo]:
    """Pods on a node as the inter-pod rules of a template see them: live pods, and the ranks of recorded
    placements whose pods do not exist yet (with the labels their pods will carry)."""
    out = [PodInfo(p.namespace, p.labels, u.node) for p in state.pods.values()
           if (u := state.counted(p)) is not None and not p.finished]
    for key, job, usages in state.reserved_ranks():
        labels = job.request.pod_labels if job.request is not None else {}
        out += [PodInfo(key[0], labels, usage.node) for usage in usages]
    return out


def pods_of_placement(state: ClusterState, key: Key, placement_id: str) -> list[PodView]:
    return [p for p in state.job_pods(key) if p.placement_id == placement_id]


def gpu_holders(state: ClusterState) -> Iterator[tuple[str, int, Key | None, str | None]]:
    """(node, GPUs, its TrainingJob or None, its deletionTimestamp when Terminating) of every pod that holds GPUs,
    and of every recorded rank whose pod does not exist yet: what backfill reads the holders' starts from."""
    for pod in state.pods.values():
        usage = state.counted(pod)
        if usage is None or not usage.gpu_count or pod.finished:
            continue
        yield usage.node, usage.gpu_count, pod.job_key, pod.deleted_at if pod.terminating else None
    for key, _, usages in state.reserved_ranks():
        for usage in usages:
            if usage.gpu_count:
                yield usage.node, usage.gpu_count, key, None


def leaving(state: ClusterState, jobs: Iterable[Key] | None = None
            ) -> list[tuple[str, tuple[int, ...], Mapping[str, int]]]:
    """(node, GPUs, requests) held by each Terminating pod (of these jobs; None: of anyone): free once they have
    gone. A preemption already under way frees them, so a preemptor waits for them rather than choosing more
    victims."""
    pods = state.pods.values() if jobs is None else [p for key in jobs for p in state.job_pods(key)]
    out = []
    for pod in pods:  # a few jobs' pods when asked for some (a pass asks per waiting gang)
        if not pod.terminating or not pod.node_name:
            continue
        node = state.nodes.get(pod.node_name)
        usage = state.counted(pod)
        if node is None or usage is None:
            continue
        holder: set[Holder] = {("pod", pod.key)}
        freed = state.usage.gpus(node) - state.usage.gpus_without(node, holder)
        out.append((pod.node_name, tuple(sorted(freed)), usage.requests))
    return out
