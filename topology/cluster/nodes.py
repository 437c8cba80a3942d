"""Node and Pod objects (plain dicts, as the API returns them) -> a solver Snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from railyard.topology.api.quantity import parse_count, parse_milli
from railyard.topology.cluster.dra_devices import STANDARD, DeviceNames, allocated, held_gpus, inventory, unpinnable
from railyard.topology.cluster.faults import DEFAULT_FAULT_CONDITIONS, maintenance_of
from railyard.topology.cluster.labels import ANNOTATION_GPUS, GPU_RESOURCE, NATIVE, QUARANTINE_TAINT, LabelScheme
from railyard.topology.cluster.levels import Levels
from railyard.topology.cluster.model import Exclusion, GpuNode, Snapshot, Taint
from railyard.topology.cluster.resources import pod_requests

# Per-GPU labels are dot-separated small integers, one per GPU index ("0.1.2.3.4.5.6.7").
_MAX_GPUS_PER_NODE = 64


class NodeError(ValueError):
    """A node that cannot be modelled; the message says which label or field is wrong."""


def _gpu_list(labels: Mapping[str, str], key: str | None, count: int, default: tuple[int, ...]) -> tuple[int, ...]:
    if key is None or key not in labels:
        return default
    raw = labels[key]
    parts = raw.split(".")
    if not all(p.isdigit() for p in parts):
        raise NodeError(f"label {key}={raw!r}: expected dot-separated integers such as 0.1.2.3")
    if len(parts) != count:
        raise NodeError(f"label {key}={raw!r}: has {len(parts)} entries but the node has {count} GPUs")
    return tuple(int(p) for p in parts)


def _gpu_count(node: Mapping[str, Any], labels: Mapping[str, str], scheme: LabelScheme) -> int:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    raw = allocatable.get(GPU_RESOURCE)
    source = f"status.allocatable[{GPU_RESOURCE}]"
    if raw is None and scheme.gpu_count and scheme.gpu_count in labels:
        raw, source = labels[scheme.gpu_count], f"label {scheme.gpu_count}"
    if raw is None:
        raise NodeError(f"no {GPU_RESOURCE} allocatable")
    try:
        count = parse_count(raw)
    except ValueError as e:
        raise NodeError(f"{source}={raw!r}: {e}") from None
    if count <= 0:
        raise NodeError(f"{source}={raw!r}: no GPUs")
    if count > _MAX_GPUS_PER_NODE:
        raise NodeError(f"{source}={raw!r}: more than {_MAX_GPUS_PER_NODE} GPUs per node")
    return count


def _domains(name: str, labels: Mapping[str, str], scheme: LabelScheme) -> tuple[tuple[str, ...], str, str, str]:
    """(ids above the spine, spine, leaf, tor) from the scheme's network levels, top to bottom."""
    ids: list[str] = []
    parent = ""  # the last real (labelled) domain id above this tier
    for tier, key in scheme.network_keys:
        if key is None:
            # The convention has no such tier: the domain collapses into its parent.
            ids.append(parent or "cluster")
            continue
        if not labels.get(key):
            raise NodeError(f"missing {tier} label {key}")
        value = labels[key]
        if scheme.qualify and parent:
            value = f"{parent}/{value}"
        ids.append(value)
        parent = value
    *upper, spine, leaf, tor = ids
    return tuple(upper), spine, leaf, tor


def _is_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def node_from_object(node: Mapping[str, Any], scheme: LabelScheme = NATIVE) -> GpuNode:
    """Model one Node object. Raises NodeError (why the node cannot be used) for any problem."""
    meta = node.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise NodeError("metadata.name is missing")
    labels: Mapping[str, str] = meta.get("labels") or {}
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        raise NodeError("cordoned (spec.unschedulable)")
    if not _is_ready(node):
        raise NodeError("not Ready")
    maintenance = maintenance_of(node)
    if maintenance is not None:
        raise NodeError(f"under planned maintenance ({maintenance})")
    # Whatever a job tolerates: a quarantined node or one whose GPUs report a fault takes no new ranks.
    for taint in spec.get("taints") or []:
        if taint.get("key") == QUARANTINE_TAINT:
            raise NodeError(f"quarantined ({QUARANTINE_TAINT}={taint.get('value') or ''})")
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") in DEFAULT_FAULT_CONDITIONS and condition.get("status") == "True":
            raise NodeError(f"GPU fault (condition {condition['type']})")
    count = _gpu_count(node, labels, scheme)
    upper, spine, leaf, tor = _domains(name, labels, scheme)
    half = max(1, count // 2)
    # Without per-GPU labels assume the common layout: GPU i on rail i, two NUMA halves, one NVSwitch.
    rails = _gpu_list(labels, scheme.gpu_rail, count, tuple(range(count)))
    numa = _gpu_list(labels, scheme.gpu_numa, count, tuple(i // half for i in range(count)))
    nvlink = _gpu_list(labels, scheme.gpu_nvlink, count, (0,) * count)
    taints = tuple(
        Taint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
        for t in spec.get("taints") or []
    )
    return GpuNode(
        name=name, spine=spine, leaf=leaf, tor=tor, upper=upper, rails=rails, numa=numa, nvlink=nvlink,
        labels=dict(labels), taints=taints, product=labels.get("nvidia.com/gpu.product", ""),
        nvlink_domain=labels.get(scheme.nvlink_domain) if scheme.nvlink_domain else None,
        allocatable=_allocatable(node),
    )


def _allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, raw in ((node.get("status") or {}).get("allocatable") or {}).items():
        try:
            out[name] = parse_milli(raw)
        except ValueError as e:
            raise NodeError(f"status.allocatable[{name}]: {e}") from None
    return out


def pod_gpu_request(pod_spec: Mapping[str, Any]) -> int:
    """GPUs a pod holds: the sum over containers, or the largest init container if that is more."""

    def one(container: Mapping[str, Any]) -> int:
        res = container.get("resources") or {}
        raw = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE)
        return parse_count(raw) if raw is not None else 0

    main = sum(one(c) for c in pod_spec.get("containers") or [])
    init = max((one(c) for c in pod_spec.get("initContainers") or []), default=0)
    return max(main, init)


def pod_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pod holds GPUs on: its binding, or for a gated Railyard pod the node it is pinned to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if ANNOTATION_GPUS in annotations:
        return pinned_node(spec)
    return None


def pinned_node(spec: Mapping[str, Any]) -> str | None:
    """The node a gated pod is pinned to: node affinity on the field metadata.name (what Railyard
    writes: the hostname label differs from the node name on some clouds), else the hostname selector."""
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for expr in term.get("matchFields") or []:
            values = expr.get("values") or []
            if expr.get("key") == "metadata.name" and expr.get("operator") == "In" and len(values) == 1:
                return expr["values"][0]
    return (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")


Trust = Callable[[Mapping[str, Any]], bool]  # is this pod object's claim believed? (topology.claims)


def trust_all(pod: Mapping[str, Any]) -> bool:
    """For the offline planner: the pods an admin lists are what-ifs, taken as written."""
    return True


@dataclass(frozen=True, slots=True)
class PodUsage:
    """What one pod holds on its node: GPU indices it names, how many GPUs it holds in all (never
    fewer than it requests: kube-scheduler counts requests) and its other resource requests."""

    node: str
    gpu_indices: tuple[int, ...]
    gpu_count: int
    requests: Mapping[str, int]


def pod_usage(pod: Mapping[str, Any], trusted: bool = True) -> PodUsage | None:
    """What a pod holds; None for one that holds nothing (finished, or unbound and not believed).
    `trusted` (topology.claims): its GPU annotation and pin count, so it holds its GPUs on its pinned
    node before it is bound; otherwise it holds its requests once bound, as kube-scheduler counts."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    spec = pod.get("spec") or {}
    node_name = pod_node(pod) if trusted else spec.get("nodeName")
    return _usage(pod, node_name, trusted, *_requests(spec)) if node_name else None


def pod_usages(pod: Mapping[str, Any]) -> tuple[PodUsage | None, PodUsage | None]:
    """pod_usage(pod) and pod_usage(pod, trusted=False), the pod's requests read once (the watch makes both for
    every pod it sees: 100,000 of them at a fresh start)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None, None
    spec = pod.get("spec") or {}
    pinned, bound = pod_node(pod), spec.get("nodeName")
    if not pinned and not bound:
        return None, None
    requests, count = _requests(spec)
    return (_usage(pod, pinned, True, requests, count) if pinned else None,
            _usage(pod, bound, False, requests, count) if bound else None)


def _requests(spec: Mapping[str, Any]) -> tuple[dict[str, int], int]:
    try:
        requests = pod_requests(spec)
    except ValueError:
        requests = {}
    try:
        count = pod_gpu_request(spec)
    except ValueError:
        count = 0
    return requests, count


def _usage(pod: Mapping[str, Any], node_name: str, trusted: bool, requests: dict[str, int], count: int) -> PodUsage:
    indices: tuple[int, ...] = ()
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_GPUS) if trusted else None
    if raw is not None:
        try:
            indices = tuple(sorted(set(parse_gpu_annotation(raw))))
        except ValueError:
            indices = ()
    return PodUsage(node_name, indices, max(count, len(indices)),
                    {k: v for k, v in requests.items() if k != GPU_RESOURCE})


def parse_gpu_annotation(raw: str) -> list[int]:
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"annotation {ANNOTATION_GPUS}={raw!r}: expected comma-separated GPU indices")
    return [int(p) for p in parts]


def model_nodes(
    node_objects: Iterable[Mapping[str, Any]], scheme: LabelScheme = NATIVE
) -> tuple[list[GpuNode], list[Exclusion]]:
    """Model every node; those that cannot be used are excluded with a reason."""
    nodes: list[GpuNode] = []
    excluded: list[Exclusion] = []
    for obj in node_objects:
        name = (obj.get("metadata") or {}).get("name") or "<unnamed>"
        try:
            nodes.append(node_from_object(obj, scheme))
        except NodeError as e:
            excluded.append(Exclusion(name, str(e)))
    nodes.sort(key=lambda n: n.name)
    excluded.sort(key=lambda e: e.node)
    return nodes, excluded


def ambiguous_domains(nodes: Iterable[GpuNode], levels: Levels) -> dict[str, str]:
    """Nodes whose domain id at some network level is also used under another parent (a TOR id under
    two leaves): the solver takes ids as unique, so the nodes under the parent with fewer of them are
    excluded, naming the clash (qualify the ids, or fix the labels). Node -> reason."""
    nodes = list(nodes)
    parents: dict[tuple[int, str], dict[str, list[str]]] = {}
    for node in nodes:
        path = node.network_path
        for i in range(1, len(path)):
            parents.setdefault((i, path[i]), {}).setdefault(path[i - 1], []).append(node.name)
    out: dict[str, str] = {}
    for (i, domain), under in sorted(parents.items()):
        if len(under) < 2:
            continue
        keep = max(under, key=lambda parent: (len(under[parent]), parent))
        names = levels.network
        level = names[i] if i < len(names) else f"level {i}"
        parent_level = names[i - 1] if i - 1 < len(names) else f"level {i - 1}"
        for parent, members in under.items():
            if parent != keep:
                for name in members:
                    out.setdefault(name, f"{level} id {domain!r} is also under {parent_level} {keep!r} (it is under "
                                         f"{parent!r} here): domain ids must be unique")
    return out


def gpus_in_use(gpu_count: int, usages: Iterable[PodUsage]) -> frozenset[int]:
    """The GPU indices held on one node: the indices pods name, then for every GPU a pod holds beyond
    those (pods that name none, or fewer than they request) the lowest free indices."""
    taken: set[int] = set()
    extra = 0
    for u in usages:
        named = [g for g in u.gpu_indices if 0 <= g < gpu_count]
        taken.update(named)
        extra += max(0, u.gpu_count - len(named))
    if extra:
        free = [i for i in range(gpu_count) if i not in taken]
        taken.update(free[:extra])
    return frozenset(taken)


def used_gpus(by_name: Mapping[str, GpuNode], pod_objects: Iterable[Mapping[str, Any]],
              trusted: Trust = trust_all) -> dict[str, frozenset[int]]:
    """GPU indices held on each node (see `gpus_in_use`). Pods that are Succeeded/Failed hold nothing."""
    per_node: dict[str, list[PodUsage]] = {}
    for pod in pod_objects:
        u = pod_usage(pod, trusted(pod))
        if u is not None and u.node in by_name:
            per_node.setdefault(u.node, []).append(u)
    out = {name: gpus_in_use(by_name[name].gpu_count, usages) for name, usages in per_node.items()}
    return {k: v for k, v in out.items() if v}


def requested_resources(pod_objects: Iterable[Mapping[str, Any]],
                        trusted: Trust = trust_all) -> dict[str, dict[str, int]]:
    """Non-GPU resource requests summed per node."""
    out: dict[str, dict[str, int]] = {}
    for pod in pod_objects:
        u = pod_usage(pod, trusted(pod))
        if u is None:
            continue
        on_node = out.setdefault(u.node, {})
        for name, amount in u.requests.items():
            on_node[name] = on_node.get(name, 0) + amount
    return out


DEVICE_KINDS = ("ResourceSlice", "ResourceClaim")


def build_snapshot(
    node_objects: Iterable[Mapping[str, Any]],
    pod_objects: Iterable[Mapping[str, Any]] = (),
    scheme: LabelScheme = NATIVE,
    trusted: Trust = trust_all,
    device_objects: Iterable[Mapping[str, Any]] = (),
    device_names: DeviceNames = STANDARD,
) -> Snapshot:
    """Nodes (usable ones modelled, the rest excluded with a reason) and the GPUs pods hold (whose
    claims are believed: `trusted`, see topology.claims). `device_objects`: ResourceSlices and
    ResourceClaims (DRA): the GPUs any claim's allocation holds are held too, and a node whose slices
    cannot pin its GPUs is excluded (topology.devices.unpinnable)."""
    nodes, excluded = model_nodes(node_objects, scheme)
    clashes = ambiguous_domains(nodes, scheme.levels)
    objects = list(device_objects)
    published = inventory((o for o in objects if o.get("kind") == "ResourceSlice"), device_names)
    for node in nodes:
        why = unpinnable(node.gpu_count, published.get(node.name))
        if why is not None:
            clashes.setdefault(node.name, why)
    if clashes:
        nodes = [n for n in nodes if n.name not in clashes]
        excluded = sorted([*excluded, *(Exclusion(n, why) for n, why in clashes.items())], key=lambda e: e.node)
    pods = list(pod_objects)
    used = used_gpus({n.name: n for n in nodes}, pods, trusted)
    held = held_gpus(published, (allocated(o) for o in objects if o.get("kind") == "ResourceClaim"))
    modelled = {n.name for n in nodes}
    for name, gpus in held.items():
        if name in modelled:
            used[name] = used.get(name, frozenset()) | gpus
    return Snapshot(tuple(nodes), used, tuple(excluded), requested_resources(pods, trusted), scheme.levels)
