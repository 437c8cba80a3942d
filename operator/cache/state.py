"""The operator's view of the cluster, fed by its reflectors (list, then watch) and by the responses
to its own writes.

Guarantees the placer stands on:
- **Ordering.** An object is only ever replaced by a newer resourceVersion, so a late watch event
  cannot undo a write whose response was already applied.
- **Expectations by write response.** A pod the operator created or released is in the state from
  the moment the API server answered; a lagging watch can never make it look deleted. A pod leaves
  the state only when a DELETED event or a re-list says it is gone.
- **Resync (Replace).** After a re-list (initial, or after 410 Gone), objects missing from the list
  leave the state — unless the state already holds a newer version than the list (a write answered
  after the list was cut).
- **Tombstones.** A deleted object is remembered (uid, resourceVersion) for a while, so a write
  response that arrives after the DELETED event never brings it back.
- **Readiness.** `ready` only once Nodes, Pods, TrainingJobs and PriorityClasses (and, with DRA,
  ResourceSlices and ResourceClaims) have each been listed completely.
- **Parsed once.** A TrainingJob is parsed (spec validated, status typed: base/objects.Job) when a
  new version of it arrives, never on a read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from railyard.operator.base.clock import Clock, SystemClock
from railyard.operator.base.keys import ANNOTATION_QUARANTINED_UNTIL
from railyard.operator.base.objects import Job, Key, PodView, parse_job, pod_view, resource_version
from railyard.operator.cache import device_book as dra
from railyard.operator.cache.device_book import ClaimView, Devices
from railyard.operator.cache.node_fingerprint import node_fingerprint
from railyard.operator.cache.pod_groups import PodGroups
from railyard.operator.cache.snapshot_usage import SnapshotUsage
from railyard.operator.cache.usage import Usage
from railyard.operator.decide.priority import PriorityClassView
from railyard.topology.cluster.dra_devices import DeviceNames
from railyard.topology.cluster.faults import NodeHealth, read_health
from railyard.topology.cluster.labels import GPU_RESOURCE, NATIVE, LabelScheme
from railyard.topology.cluster.model import Exclusion, GpuNode, Snapshot
from railyard.topology.cluster.nodes import NodeError, PodUsage, ambiguous_domains, node_from_object
from railyard.topology.cluster.pod_trust import carried_pod_names
from railyard.topology.cluster.resources import pod_requests

KINDS = ("nodes", "pods", "trainingjobs", "priorityclasses")  # what the reflectors list and watch
CLUSTER_SCOPED = ("nodes", "priorityclasses")
TOMBSTONE_SECONDS = 600.0
_CHANGES = itertools.count()  # ClusterState.pods_changed's numbers: never reused, even across jobs
_NODE_MEMO_ENTRIES = 256  # distinct templates whose node checks are kept between node changes


def _newer(candidate: int | None, held: int | None) -> bool:
    """Whether an incoming version may replace the held one (equal versions are the same object)."""
    return candidate is None or held is None or candidate >= held


class ClusterState:
    def __init__(self, scheme: LabelScheme = NATIVE, clock: Clock | None = None,
                 device_names: DeviceNames | None = None, dra_required: bool = False) -> None:
        """`device_names`: read ResourceSlices and ResourceClaims (of these drivers); `dra_required`: a
        node whose GPUs no slice publishes is excluded (RAILYARD_DRA=on)."""
        self.scheme = scheme
        self.clock = clock or SystemClock()
        self.devices = Devices(device_names) if device_names is not None else None
        self.dra_required = dra_required and device_names is not None
        self.kinds = KINDS + (dra.KINDS if device_names is not None else ())
        self.nodes: dict[str, GpuNode] = {}
        self.excluded: dict[str, Exclusion] = {}
        self.health: dict[str, NodeHealth] = {}  # per node, for the fault path (topology/cluster/faults.py)
        self.last_model: dict[str, GpuNode] = {}  # last usable model per node: where a lost node was
        self.pods: dict[Key, PodView] = {}
        # pod -> (first seen bound, first seen Terminating), monotonic: timeouts run from what was observed
        self._pod_seen: dict[Key, tuple[float | None, float | None]] = {}
        self.jobs: dict[Key, Job] = {}
        self.priority_classes: dict[str, PriorityClassView] = {}
        self.priority_rv: dict[str, int | None] = {}
        self.usage = Usage()
        self.synced: set[str] = set()
        self.node_epoch = 0  # bumps whenever the set of usable nodes or a node's model changes
        self.jobs_epoch = 0  # bumps whenever a job is stored or forgotten, or a PriorityClass changes
        self.resets = 0  # kinds dropped because a list went back in time (etcd restore)
        self._node_meta: dict[str, tuple[int | None, tuple]] = {}  # name -> (resourceVersion, fingerprint)
        self._pods_by_job: dict[Key, set[Key]] = {}
        self._groups = PodGroups()  # the gangs of workloads Railyard places without owning them
        self.pods_changed: dict[Key, int] = {}  # job -> a number new at each change to one of its pods
        self._listed_at: dict[str, int] = {}  # kind -> resourceVersion of its last complete list
        self._tombstones: dict[tuple[str, Key], tuple[str, int | None, float]] = {}
        self._reserved: dict[Key, set[int]] = {}  # job -> ranks whose reservation is held
        self._plans: dict[Key, tuple[str, dict[str, tuple[int, PodUsage]], frozenset[str]]] = {}  # (id, ranks, kept)
        # An adopted gang's placement names its owner's pods by uid too: only those pods' claims are believed.
        self._adopted_uids: dict[Key, dict[str, str]] = {}
        self._snapshot: Snapshot | None = None
        self._nodes_sorted: tuple[GpuNode, ...] | None = None
        self._clashes: tuple[Exclusion, ...] = ()  # nodes whose domain ids clash (nodes.ambiguous_domains)
        self._node_memo: dict[object, object] = {}  # the solver's node-only results, kept while nodes stay
        self._snapshot_usage = SnapshotUsage()

    @property
    def ready(self) -> bool:
        return self.synced.issuperset(self.kinds)

    # --- events (watch, list, write responses) ---------------------------------------------------

    def apply(self, kind: str, event_type: str | None, body: Mapping[str, Any] | PodView | ClaimView) -> None:
        if self._predates_list(kind, body):
            return
        if kind == "pods" and not isinstance(body, ClaimView):
            self.apply_pod(event_type, body)
        elif kind == dra.CLAIMS and not isinstance(body, PodView):
            self.apply_claim(event_type, body if isinstance(body, ClaimView) else dra.claim_view(body))
        elif isinstance(body, PodView | ClaimView):
            raise TypeError(f"a {type(body).__name__} delivered as {kind}")
        elif kind == dra.SLICES:
            self.apply_slice(event_type, body)
        elif kind == "nodes":
            self.apply_node(event_type, body)
        elif kind == "priorityclasses":
            self.apply_priority_class(event_type, body)
        else:
            self.apply_job(event_type, body)

    def _predates_list(self, kind: str, body: Mapping[str, Any] | PodView | ClaimView) -> bool:
        """An event at or before the last list's version, about an object this state does not hold:
        the list already says that object was gone (a late or replayed event must not resurrect a
        deleted job; for objects held, resourceVersion ordering already rejects old versions)."""
        floor = self._listed_at.get(kind)
        if isinstance(body, PodView | ClaimView):
            rv, key = body.resource_version, body.key
        else:
            meta = body.get("metadata") or {}
            rv = resource_version(body)
            key = ("" if kind in CLUSTER_SCOPED else str(meta.get("namespace") or ""), str(meta.get("name")))
        if floor is None or rv is None or rv > floor:
            return False
        if kind == "nodes":
            return key[1] not in self._node_meta
        if kind == "priorityclasses":
            return key[1] not in self.priority_classes
        if kind == dra.SLICES:
            return self.devices is None or not self.devices.has_slice(key[1])
        if kind == dra.CLAIMS:
            return self.devices is None or key not in self.devices.claims
        return key not in self.pods if kind == "pods" else key not in self.jobs

    def _buried(self, kind: str, key: Key, body: Mapping[str, Any], rv: int | None) -> bool:
        stone = self._tombstones.get((kind, key))
        if stone is None:
            return False
        uid, dead_at, _ = stone
        if (body.get("metadata") or {}).get("uid") == uid or (rv is not None and dead_at is not None and rv <= dead_at):
            return True
        del self._tombstones[(kind, key)]  # a new object took the name
        return False

    def _bury(self, kind: str, key: Key, body: Mapping[str, Any], rv: int | None) -> None:
        self._tombstones[(kind, key)] = ((body.get("metadata") or {}).get("uid") or "", rv, self.clock.monotonic())

    def prune_tombstones(self) -> None:
        cutoff = self.clock.monotonic() - TOMBSTONE_SECONDS
        for k in [k for k, (_, _, at) in self._tombstones.items() if at < cutoff]:
            del self._tombstones[k]

    def apply_node(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        rv = resource_version(body)
        held = self._node_meta.get(name)
        if event_type == "DELETED":
            if held is not None and not _newer(rv, held[0]):
                return
            self._drop_node(name)
            self._bury("nodes", ("", name), body, rv)
            return
        if held is not None and not _newer(rv, held[0]):
            return
        if self._buried("nodes", ("", name), body, rv):
            return
        fingerprint = node_fingerprint(body)
        if held is not None and held[1] == fingerprint:
            self._node_meta[name] = (rv, fingerprint)
            return
        previous = self.health.get(name)
        self._drop_node(name)
        self._node_meta[name] = (rv, fingerprint)
        self.health[name] = read_health(body, ANNOTATION_QUARANTINED_UNTIL).observed(previous, self.clock.monotonic())
        try:
            self.nodes[name] = self.last_model[name] = node_from_object(body, self.scheme)
        except NodeError as e:
            self.excluded[name] = Exclusion(name, str(e))
        self.usage.freed += 1  # a new or changed node may offer what a waiting job needs
        self._changed_nodes()

    def _drop_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None or self.excluded.pop(name, None) is not None:
            self._changed_nodes()
        self._node_meta.pop(name, None)
        self.health.pop(name, None)
        self.usage.node_changed(name)

    def _changed_nodes(self) -> None:
        self.node_epoch += 1
        self._nodes_sorted = None
        self._node_memo = {}
        self._snapshot = None

    def apply_pod(self, event_type: str | None, body: Mapping[str, Any] | PodView) -> None:
        view = body if isinstance(body, PodView) else pod_view(body)
        key = view.key
        held = self.pods.get(key)
        if held is not None and not _newer(view.resource_version, held.resource_version):
            return
        raw = {"metadata": {"uid": view.uid}}
        if event_type == "DELETED":
            self._remove_pod(key)
            self._bury("pods", key, raw, view.resource_version)
            return
        if self._buried("pods", key, raw, view.resource_version):
            return
        if held is not None and held.job_key != view.job_key:
            self._remove_pod(key)
        self.pods[key] = view
        if view.node_name or view.terminating:
            bound, terminating = self._pod_seen.get(key, (None, None))
            now = self.clock.monotonic()
            self._pod_seen[key] = (bound if bound is not None or not view.node_name else now,
                                   terminating if terminating is not None or not view.terminating else now)
        self.usage.set(("pod", key), self.counted(view))
        if view.job_key:
            self._pods_by_job.setdefault(view.job_key, set()).add(key)
            self._pod_of_job_changed(view.job_key, view.name)
        self._groups.changed(held, view, next(_CHANGES))
        self._snapshot = None

    def group_pods(self, namespace: str, group: str) -> list[PodView]:  # an adopted gang's (its owner's) pods
        return [self.pods[k] for k in self._groups.pods(namespace, group) if k in self.pods]

    @property
    def groups(self) -> list[Key]:  # (namespace, group key) of every adopted gang with a pod
        return self._groups.groups

    def _trusted(self, view: PodView) -> bool:
        """Is the pod's claim (GPU annotation, node pin) believed? Only for a pod owned by the
        TrainingJob whose current placement names it (topology.claims), or, of an adopted gang (its owner's
        pod), the pod of the uid that placement records."""
        if view.job_key is None:
            return False
        job = self.jobs.get(view.job_key)
        entry = self._plans.get(view.job_key)
        if job is None or entry is None or view.name not in entry[1]:
            return False
        adopted = self._adopted_uids.get(view.job_key)
        if adopted is not None and view.name in adopted:
            return view.uid == adopted[view.name]
        return view.owner_uid is not None and job.uid == view.owner_uid

    def counted(self, view: PodView) -> PodUsage | None:  # its claim when believed, else its requests once bound
        return view.usage if self._trusted(view) else view.bound_usage

    def _remove_pod(self, key: Key) -> None:
        view = self.pods.pop(key, None)
        self._pod_seen.pop(key, None)
        if view is None:
            return
        self.usage.set(("pod", key), None)
        self._groups.changed(view, None, next(_CHANGES))
        if view.job_key:
            members = self._pods_by_job.get(view.job_key)
            if members is not None:
                members.discard(key)
                if not members:
                    del self._pods_by_job[view.job_key]
            self._pod_of_job_changed(view.job_key, view.name)
        self._snapshot = None

    # --- DRA: published devices and the claims holding them ------------------------------------------

    def apply_slice(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        if self.devices is None:
            return
        name = str(body["metadata"]["name"])
        if self.devices.has_slice(name) and not _newer(resource_version(body), self.devices.slice_version(name)):
            return
        epoch = self.devices.epoch
        for key in self.devices.apply_slice(event_type, body):
            self.usage.set(("claim", key), self.devices.held(key))
        if epoch != self.devices.epoch:
            self.usage.freed += 1  # a node's devices appeared or changed: a waiting job may fit
            self._changed_nodes()

    def apply_claim(self, event_type: str | None, view: ClaimView) -> None:
        """Any claim's allocated GPUs are held (Railyard's own too: the same indices its pods name)."""
        if self.devices is None:
            return
        held = self.devices.claims.get(view.key)
        if held is not None and not _newer(view.resource_version, held.resource_version):
            return
        self.devices.apply_claim(event_type, view)
        self.usage.set(("claim", view.key), self.devices.held(view.key))
        self._snapshot = None

    def apply_priority_class(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        rv = resource_version(body)
        if name in self.priority_rv and not _newer(rv, self.priority_rv[name]):
            return
        if event_type == "DELETED":
            self.priority_classes.pop(name, None)
            self.priority_rv.pop(name, None)
        else:
            try:
                self.priority_classes[name] = PriorityClassView.of(body)
            except (KeyError, TypeError, ValueError):
                return  # the API server validates PriorityClasses: nothing else arrives
            self.priority_rv[name] = rv
        self.jobs_epoch += 1  # a job's priority is its class's value
        self.usage.freed += 1  # a waiting job's class may exist now

    def apply_job(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        rv = resource_version(body)
        current = self.jobs.get(key)
        if current is not None and not _newer(rv, resource_version(current.body)):
            return  # a late event must not undo a status the placer already wrote
        if event_type == "DELETED":
            self.jobs.pop(key, None)
            self._bury("trainingjobs", key, body, rv)
            self._refresh_reservation(key)
            return
        if self._buried("trainingjobs", key, body, rv):
            return  # a write response for a job deleted meanwhile
        if current is not None and rv is not None and rv == resource_version(current.body):
            return  # the watch echoing a write whose answer is applied already: same object
        self.jobs[key] = parse_job(_plain(body))
        self._refresh_reservation(key)

    def replace(self, kind: str, bodies: Iterable[Mapping[str, Any] | PodView | ClaimView],
                list_rv: int | None) -> None:
        """Re-list semantics (a reflector's Replace): apply everything listed, forget what vanished. A
        list older than the last one (the store went back: an etcd restore) resets the kind first: the
        versions held would otherwise reject every object the restored store holds."""
        seen: set[Key] = set()
        previous = self._listed_at.get(kind)
        if list_rv is not None and previous is not None and list_rv < previous:
            self.resets += 1
            for key, _ in self._held(kind):
                self._forget(kind, key)
            self._tombstones = {k: v for k, v in self._tombstones.items() if k[0] != kind}
        self._listed_at.pop(kind, None)  # listed objects are applied whatever their version
        for body in bodies:
            self.apply(kind, "MODIFIED", body)
            if isinstance(body, PodView | ClaimView):
                seen.add(body.key)
            else:
                meta = body["metadata"]
                seen.add((meta.get("namespace") or "", meta["name"]) if kind not in CLUSTER_SCOPED
                         else ("", meta["name"]))
        for key, held_rv in self._held(kind):
            if key in seen:
                continue
            if list_rv is not None and held_rv is not None and held_rv > list_rv:
                continue  # we know a version newer than the list: written after the list was cut
            self._forget(kind, key)
        if list_rv is not None:
            self._listed_at[kind] = list_rv
        self.synced.add(kind)

    def _held(self, kind: str) -> list[tuple[Key, int | None]]:
        if kind == "nodes":
            return [(("", n), meta[0]) for n, meta in self._node_meta.items()]
        if kind == "pods":
            return [(k, v.resource_version) for k, v in self.pods.items()]
        if kind == "priorityclasses":
            return [(("", n), self.priority_rv.get(n)) for n in self.priority_classes]
        if kind == dra.SLICES:
            return [(("", n), rv) for n, rv in self.devices.slice_names()] if self.devices is not None else []
        if kind == dra.CLAIMS:
            return [(k, c.resource_version) for k, c in self.devices.claims.items()] if self.devices is not None else []
        return [(k, resource_version(j.body)) for k, j in self.jobs.items()]

    def _forget(self, kind: str, key: Key) -> None:
        if kind == "nodes":
            self._drop_node(key[1])
        elif kind == "pods":
            self._remove_pod(key)
        elif kind == "priorityclasses":
            self.apply_priority_class("DELETED", {"metadata": {"name": key[1]}})
        elif kind == dra.SLICES:
            self.apply_slice("DELETED", {"metadata": {"name": key[1]}})
        elif kind == dra.CLAIMS:
            if self.devices is not None:
                self.devices.forget_claim(key)
                self.usage.set(("claim", key), None)
        else:
            self.jobs.pop(key, None)
            self._refresh_reservation(key)

    # --- reservations: a recorded placement holds its GPUs before its pods exist -------------------

    def _refresh_reservation(self, key: Key) -> None:
        """Ranks of a live placement whose pod does not exist yet hold their node's GPUs and the
        template's requests; once the rank's pod exists it holds them itself. Recomputed when the job
        changes (the template's requests are parsed here, once); a pod event touches only its rank."""
        self.jobs_epoch += 1  # called whenever a job is stored or forgotten
        job = self.jobs.get(key)
        placement = job.placement if job is not None else None  # a finished job's pods hold GPUs until gone
        plan: dict[str, tuple[int, PodUsage]] = {}
        if job is not None and placement is not None:
            try:
                requests = pod_requests((job.body.get("spec", {}).get("template") or {}).get("spec") or {})
            except ValueError:
                requests = {}
            requests = {k: v for k, v in requests.items() if k != GPU_RESOURCE}
            for r in placement.ranks:
                gpus = tuple(sorted(r.gpus))
                plan[r.pod or ""] = (r.rank, PodUsage(r.node, gpus, len(gpus), requests))
            self._plans[key] = (placement.id, plan, frozenset(carried_pod_names(job.name, placement)))
            uids = {r.pod or "": r.pod_uid for r in placement.ranks if r.pod_uid}
            if uids:
                self._adopted_uids[key] = uids
            else:
                self._adopted_uids.pop(key, None)
        else:
            self._plans.pop(key, None)
            self._adopted_uids.pop(key, None)
            if job is None:
                self.pods_changed.pop(key, None)
        planned = {rank for rank, _ in plan.values()}
        for rank in self._reserved.get(key, set()) - planned:  # no longer planned: capacity freed
            self.usage.set(("rank", key, rank), None)
            self._reserved[key].discard(rank)
        for pod_key in self._pods_by_job.get(key, ()):  # the plan decides whose claims are believed
            view = self.pods.get(pod_key)
            if view is not None:
                self.usage.set(("pod", pod_key), self.counted(view))
        for pod_name in plan:
            self._sync_rank(key, pod_name)
        self._snapshot = None

    def _pod_of_job_changed(self, key: Key, pod_name: str) -> None:
        if key in self.jobs:  # a deleted job's pods going away leave no entry behind
            self.pods_changed[key] = next(_CHANGES)
        self._sync_rank(key, pod_name)

    def _sync_rank(self, key: Key, pod_name: str) -> None:
        """The rank whose pod is `pod_name`: reserved while that pod (of this placement) is absent or
        finished, handed over to the pod while it exists."""
        entry = self._plans.get(key)
        if entry is None or pod_name not in entry[1]:
            return
        placement_id, plan, carried = entry
        rank, usage = plan[pod_name]
        pod = self.pods.get((key[0], pod_name))
        reserved = self._reserved.setdefault(key, set())
        live = pod is not None and (pod.placement_id == placement_id or pod_name in carried) and not pod.finished \
            and self._trusted(pod)
        if live or ((job := self.jobs.get(key)) is not None and job.finished):  # its missing pods: never made
            if rank in reserved:
                self.usage.set(("rank", key, rank), None, handover=live)
                reserved.discard(rank)
        else:
            self.usage.set(("rank", key, rank), usage)
            reserved.add(rank)
        self._snapshot = None

    # --- queries --------------------------------------------------------------------------------

    def job_version(self, job: Job) -> tuple[int | None, str | None]:
        """Changes whenever the job or one of its pods does (an adopted gang: its group's; a pass skips on it)."""
        if job.spec is not None and job.spec.adopt is not None:
            return self._groups.version(job.namespace, job.spec.adopt.group), job.resource_version
        return self.pods_changed.get(job.key), job.resource_version

    def job_pods(self, key: Key) -> list[PodView]:
        return [self.pods[k] for k in sorted(self._pods_by_job.get(key, ())) if k in self.pods]

    def pod_times(self, key: Key) -> tuple[dict[str, float], dict[str, float]]:
        """The job's pods by name: when each was first seen bound, and first seen Terminating."""
        bound: dict[str, float] = {}
        terminating: dict[str, float] = {}
        for pod in self._pods_by_job.get(key, ()):
            first_bound, first_terminating = self._pod_seen.get(pod, (None, None))
            if first_bound is not None:
                bound[pod[1]] = first_bound
            if first_terminating is not None:
                terminating[pod[1]] = first_terminating
        return bound, terminating

    def reserved_ranks(self) -> Iterable[tuple[Key, Job, list[PodUsage]]]:
        """Every recorded placement's ranks whose pods do not exist yet: (job key, job, what each holds)."""
        for key, ranks in self._reserved.items():
            entry, job = self._plans.get(key), self.jobs.get(key)
            if ranks and entry is not None and job is not None:
                yield key, job, [usage for rank, usage in entry[1].values() if rank in ranks]

    def snapshot(self) -> Snapshot:
        """An immutable snapshot; cached until something it reads changes."""
        if self._snapshot is None:
            if self._nodes_sorted is None:
                models = sorted(self.nodes.values(), key=lambda n: n.name)
                clashes = ambiguous_domains(models, self.scheme.levels)
                if self.devices is not None:
                    clashes.update(self.devices.unpinnable(models, self.dra_required))
                self._nodes_sorted = tuple(n for n in models if n.name not in clashes)
                self._clashes = tuple(Exclusion(n, why) for n, why in sorted(clashes.items()))
            used, requested, arrays = self._snapshot_usage.current(self._nodes_sorted, self.usage)
            excluded = sorted([*self.excluded.values(), *self._clashes], key=lambda e: e.node)
            if len(self._node_memo) > _NODE_MEMO_ENTRIES:  # an entry is a list over the nodes, one per template
                self._node_memo = {}
            self._snapshot = Snapshot(self._nodes_sorted, used, tuple(excluded), requested, self.scheme.levels,
                                      self._node_memo, arrays)
        return self._snapshot


def _plain(value: Any) -> Any:
    """Keep plain dicts (bodies may be read-only views)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
