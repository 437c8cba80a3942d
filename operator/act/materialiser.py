"""Creates and releases gangs: the one way Railyard's pods come to exist. Every recorded placement —
a first placement, a resumed one, a restart's new attempt, a resize, a shrink — joins the release
line (release_line.py) and, when its turn comes, gets its headless Service and its gated, pinned pods,
then all gates are removed at once and Placed becomes Released.

Write-ahead protocol (crash points named as RAILYARD_TEST_CRASH_AFTER takes them):
1. the placement (ranks, nodes, GPUs, a placement id) is in the job's status (written by the caller);
2. Service and pods are created; a name conflict is ours only when the object carries this
   placement's id or is owned by this job, else the placement is dropped (NameConflict) — "pods-created";
   in DRA mode each pinned pod's ResourceClaim follows, owned by the pod — "claims-created";
3. every gate is removed, then Placed=Released — "released".
A leader that starts later finds a job stuck between 1 and 3 (assess -> Resume) and finishes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math

from railyard.operator.act.actor_context import Context
from railyard.operator.act.events import Events
from railyard.operator.act.pods import PodDeleter
from railyard.operator.act.release_line import ReleaseLine
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base import metrics
from railyard.operator.base.clock import utc
from railyard.operator.base.keys import ANNOTATION_PLACEMENT_ID, LABEL_RESTART
from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import PlacedReason
from railyard.operator.cache.state_views import pods_of_placement
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.adoption import pin_patch, unpinned
from railyard.operator.decide.assess import REFUSED_PREFIX
from railyard.operator.decide.builders import PodOptions, build_pod, build_service
from railyard.operator.decide.resource_claims import build_claim, claim_name
from railyard.operator.kube.client import ApiException, Fenced
from railyard.topology.cluster.dra_devices import NodeDevices, rail_order
from railyard.topology.cluster.pod_trust import carried_pod_names, pod_name
from railyard.topology.solver.placement import Placement

log = logging.getLogger("railyard.materialiser")
QUOTA_RETRY_SECONDS = 30.0  # a placement a ResourceQuota refused is tried again after this (decide/assess)


class CreateRefused(Exception):
    """The API server refused an object the placement needs; `reason` says how the job is marked."""

    def __init__(self, reason: PlacedReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _deadline_left(job: Job, own: int | None, now: float) -> int | None:
    """The seconds an adopted pod may still run under its gang's time limit, unless its own
    activeDeadlineSeconds ends it sooner already (the API never lets that be raised)."""
    deadline = job.deadline
    if deadline is None:
        return None
    left = math.ceil(deadline.timestamp() - now)
    return None if own is not None and own <= left else left


def read_ca(path: str) -> str | None:
    """The report endpoint's CA for the pods; read once (a CA outlives the serving certificates it
    signs). Unreadable: logged, and pods get none (a worker then cannot verify the endpoint)."""
    if not path:
        return None
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError as e:
        log.error("report CA %s unreadable (%s): gang pods get no RAILYARD_REPORT_CA", path, e)
        return None


class Materialiser:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events, pods: PodDeleter) -> None:
        self.ctx = ctx
        self.writer = writer
        self.events = events
        self.pods = pods
        reports = ctx.settings.reports
        self.options = PodOptions(ctx.settings.placement.master_port, reports.url or None, reports.audience,
                                  read_ca(reports.ca_file))
        # Two pods in flight per request worker; small gangs beside the line.
        self.line = ReleaseLine(2 * ctx.settings.api.workers, ctx.settings.placement.express_pods)
        self._waiting: dict[Key, asyncio.Task[None]] = {}  # gangs waiting for or in their turn

    def pending(self, key: Key) -> bool:
        """Its gang waits for or is in its turn: the loop leaves the job alone meanwhile."""
        return key in self._waiting

    @property
    def busy(self) -> bool:
        return bool(self._waiting)

    def enqueue(self, job: Job, only: tuple[str, ...] | None = None) -> None:
        """Join the line with the job's recorded placement; `only`: create just these pods (the rest
        exist). When the turn comes, a job deleted or placed anew meanwhile is skipped."""
        placement = job.placement
        if placement is None or job.key in self._waiting:
            return
        placement_id, size = placement.id, len(only) if only is not None else len(placement.ranks)

        async def step() -> None:
            current = self.ctx.state.jobs.get(job.key)
            if current is None or current.deleting or current.placement is None or \
                    current.placement.id != placement_id:
                return
            await self.writer.guard(job.key, self.materialise(current, only))

        async def in_turn() -> None:
            try:
                await self.line.run(size, step, len(placement.ranks))
            except Fenced:
                log.info("job %s/%s: leadership ended before its gang was released", *job.key)
            finally:
                self._waiting.pop(job.key, None)
                self.writer.wake()  # its next step (or a retry) belongs to the loop again

        self._waiting[job.key] = asyncio.get_running_loop().create_task(in_turn())

    async def drained(self) -> None:
        """Until every gang waiting for or in its turn is through."""
        while self._waiting:
            await asyncio.gather(*list(self._waiting.values()), return_exceptions=True)

    def stop(self) -> None:
        """Leadership ended: the gangs not yet through are the next leader's (their placements are
        recorded; it creates what is missing)."""
        for task in self._waiting.values():
            task.cancel()

    async def refusal(self, job: Job, placement: Placement) -> CreateRefused | None:
        """Whether the API server would refuse the gang's pods (its quota, its PriorityClass, an admission
        webhook), asked with a dry run of its first rank's pod before anyone is evicted for it; None: admitted."""
        first = min(placement.replicas, key=lambda r: r.rank)
        body = build_pod(job, first.rank, first.node, list(first.gpus), len(placement.replicas),
                         placement.rail_aligned, "dry-run", self.options, pod_name(job.name, first.rank))
        try:
            await self.ctx.api.create_dry_run("pods", body)
        except ApiException as e:
            refused = _refused(e, "pods", body["metadata"]["name"])
            if refused is None:
                raise
            return refused
        return None

    async def materialise(self, job: Job, only: tuple[str, ...] | None) -> None:
        """Create the Service and the (missing) pods, then release the whole gang at once."""
        placement = job.placement
        assert placement is not None
        ranks = placement.ranks
        if job.spec is not None and job.spec.adopt is not None:
            if await self._pin_adopted(job):
                await self._release(job, 0)
            return
        pinned = {r.rank: self._devices(r.node, list(r.gpus)) for r in ranks}
        gpus = {r.rank: self._rail_order(r.node, r.gpus) if pinned[r.rank] is not None else list(r.gpus)
                for r in ranks}
        try:
            await self._create_owned("services", build_service(job), placement.id, job.uid)
            # Never made again under their names: a kept pod that is gone is a lost rank (assess restarts it).
            kept = carried_pod_names(job.name, placement)
            pods = [build_pod(job, r.rank, r.node, gpus[r.rank], len(ranks), placement.rail_aligned, placement.id,
                              self.options, r.pod, pinned[r.rank])
                    for r in ranks if (only is None or r.pod in only) and r.pod not in kept]
            stored = await asyncio.gather(*(self.ctx.limited(self._create_owned, "pods", p, placement.id, job.uid)
                                            for p in pods))
            self.ctx.crash_point("pods-created")
            await self._create_claims(job, {(p or {}).get("metadata", {}).get("name"): p for p in stored},
                                      pinned, gpus)
        except CreateRefused as refused:
            await self._refuse(job, refused)
            return
        await self._release(job, len(((job.body["spec"].get("template") or {}).get("spec") or {}).get(
            "schedulingGates") or []))
        # After the release, not before: the placement names the kept pods already (pod_trust.carried_pod_names),
        # and 1,023 relabels took 12 s at 100,000 pods, which the new pod's binding need not wait for.
        await self.carry_over(job)

    async def carry_over(self, job: Job) -> None:
        """The pods an in-place restart kept (running, of an earlier attempt) labelled and annotated with this
        attempt, for whoever selects pods by them; the operator's own checks (reports, addresses, evictions) read
        the placement, which names them from the start."""
        placement = job.placement
        assert placement is not None
        attempt = str(job.restart_count)
        patches = []
        for r in placement.ranks:
            view = self.ctx.state.pods.get((job.namespace, r.pod or ""))
            if view is None or view.gated or view.labels.get(LABEL_RESTART) == attempt:
                continue
            patches.append((r.pod or "", view.uid, {"metadata": {
                "labels": {LABEL_RESTART: attempt}, "annotations": {ANNOTATION_PLACEMENT_ID: placement.id}}}))
        stored = await asyncio.gather(*(self.ctx.limited(self.ctx.api.patch_pod, job.namespace, *each)
                                        for each in patches))
        for body in stored:
            if body is not None:
                self.ctx.state.apply_pod("MODIFIED", body)

    async def _pin_adopted(self, job: Job) -> bool:
        """An adopted gang's pods (their owner's) pinned to the placement's nodes, each still the pod the placement
        names (its uid); False when one is gone or replaced (the next pass decides again)."""
        placement = job.placement
        assert placement is not None
        patches = []
        for r in placement.ranks:
            view = self.ctx.state.pods.get((job.namespace, r.pod or ""))
            if view is not None and not view.gated and view.uid == r.pod_uid:
                continue  # released already (a survivor of a replacement, or a resumed release)
            if view is None or (r.pod_uid and view.uid != r.pod_uid) or not view.gated:
                log.info("job %s/%s: adopted pod %s changed before it was pinned", *job.key, r.pod)
                return False
            if view.placement_id == placement.id:
                continue  # pinned already
            # Built from the watched pod (its node affinity), sent for its uid only: no read per pod.
            # A pin of a placement given back since (a rollback) is taken off first: two pins never both hold.
            pod = {"spec": unpinned({"affinity": {"nodeAffinity": view.node_affinity}})} if view.node_affinity else {}
            patch = pin_patch(pod, job.name, r.rank, job.restart_count, r.node, r.gpus, placement.id,
                              _deadline_left(job, view.active_deadline, self.ctx.clock.time()))
            patches.append((r.pod or "", view.uid, patch))
        stored = await asyncio.gather(*(self.ctx.limited(self.ctx.api.patch_pod, job.namespace, *each)
                                        for each in patches))  # all at once, as a TrainingJob's pods are created
        for body in stored:
            if body is not None:
                self.ctx.state.apply_pod("MODIFIED", body)
        if any(body is None for body in stored):
            return False
        self.ctx.crash_point("pods-created")
        return True

    async def _release(self, job: Job, gate: int) -> None:
        """Remove every rank's gate at once, then say so (Placed=Released), now or with its Running."""
        placement = job.placement
        assert placement is not None
        ranks = placement.ranks
        # A pod the state already holds ungated (a resumed release) costs no request.
        held = self.ctx.state.pods
        kept = carried_pod_names(job.name, placement)
        gated = [r for r in ranks if ((view := held.get((job.namespace, r.pod or ""))) is None and r.pod not in kept)
                 or (view is not None and view.gated)]
        released = await asyncio.gather(*(self.ctx.limited(self.ctx.api.release_pod, job.namespace, r.pod or "", gate)
                                          for r in gated))
        for pod in released:
            if pod:
                self.ctx.state.apply_pod("MODIFIED", pod)
        self.ctx.crash_point("released")
        now = self.ctx.clock.time()
        memory = self.ctx.memories.recall(job)
        if self.ctx.settings.placement.release_record_seconds > 0:
            # Recorded in the status with Running, or on its own if the gang is not running soon (assess:
            # RecordRelease): one write fewer per gang. A successor that finds it unrecorded (every pod
            # ungated) records it as found.
            memory.released_at = (placement.id, now)
        else:
            current = self.writer.current(job)
            if await self.writer.patch(current, transitions.released(current, utc(now))) is None:
                return
        memory.released = (placement.id, self.ctx.clock.monotonic())
        created = job.created.timestamp() if job.created is not None else now
        metrics.RELEASE_SECONDS.observe(max(0.0, now - created))
        metrics.PLACEMENTS.inc()
        metrics.TORS_SPANNED.observe(placement.tors)
        await self.events.normal(job, PlacedReason.RELEASED, f"gang of {len(ranks)} released: "
                                 f"{placement.tors} TORs, rail-aligned={placement.rail_aligned}", key=placement.id)

    def _devices(self, node: str, gpus: list[int]) -> NodeDevices | None:
        """The node's published devices when its replicas are pinned through DRA (every chosen GPU
        published, with its rail NIC), else None: the device plugin's. Read from the slices, not the
        node's model, which may be out of the state for a moment (a node NotReady under load)."""
        devices = self.ctx.state.devices
        published = devices.nodes.get(node) if devices is not None else None
        if published is None or not published.gpus:
            return None
        missing = [g for g in gpus if g not in published.gpus or published.nic_for(g) is None]
        if missing:  # the snapshot excludes such a node; a slice changed after the solve
            log.warning("node %s: GPU %d or its rail NIC is not published; its replica pod gets the device "
                        "plugin's GPUs", node, missing[0])
            return None
        return published

    def _rail_order(self, node: str, gpus: list[int]) -> list[int]:
        model = self.ctx.state.nodes.get(node) or self.ctx.state.last_model.get(node)
        return rail_order(gpus, model.rails) if model is not None else list(gpus)

    async def _create_claims(self, job: Job, created: dict[str | None, dict | None],
                             pinned: dict[int, NodeDevices | None], gpus: dict[int, list[int]]) -> None:
        """Every DRA-pinned rank's ResourceClaim, owned by its pod: the pods just created, and those of an
        interrupted release whose claim the state does not hold."""
        placement = job.placement
        assert placement is not None
        devices = self.ctx.state.devices
        work = []
        for r in placement.ranks:
            node_devices = pinned[r.rank]
            if node_devices is None or devices is None:
                continue
            name = r.pod or ""
            pod = created.get(name)
            if pod is None:
                if (job.namespace, claim_name(name)) in devices.claims:
                    continue
                view = self.ctx.state.pods.get((job.namespace, name))
                if view is None:
                    continue  # gone meanwhile: assess restarts the gang
                pod = {"metadata": {"name": name, "namespace": job.namespace, "uid": view.uid,
                                    "annotations": {ANNOTATION_PLACEMENT_ID: placement.id}}}
            claim = build_claim(pod, job.name, gpus[r.rank], node_devices, self.ctx.settings.dra.names)
            owner = pod["metadata"]["uid"]
            work.append(self.ctx.limited(self._create_owned, "resourceclaims", claim, placement.id, owner))
        await asyncio.gather(*work)
        if work:
            self.ctx.crash_point("claims-created")

    async def _create_owned(self, plural: str, body: dict, placement_id: str, owner_uid: str) -> dict | None:
        """Create, or accept an existing object only if it is ours (this placement's id, or owned by
        this job). Someone else's object, or a body the API server refuses, stops the placement."""
        try:
            created, stored = await self.ctx.api.create(plural, body)
        except ApiException as e:
            refused = _refused(e, plural, body["metadata"]["name"])
            if refused is None:
                raise
            raise refused from None
        if stored is None:
            return None
        if not created:
            meta = stored.get("metadata") or {}
            ours = (meta.get("annotations") or {}).get(ANNOTATION_PLACEMENT_ID) == placement_id or \
                any(o.get("uid") == owner_uid for o in meta.get("ownerReferences") or [])
            if not ours:
                raise CreateRefused(PlacedReason.NAME_CONFLICT, f"{plural[:-1]} {meta.get('namespace')}/"
                                    f"{meta.get('name')} already exists and does not belong to this job; rename the "
                                    "job or delete it")
        if plural == "pods":
            self.ctx.state.apply_pod("ADDED", stored)
        elif plural == "resourceclaims":
            self.ctx.state.apply("resourceclaims", "ADDED", stored)
        return stored

    async def _refuse(self, job: Job, refused: CreateRefused) -> None:
        """Undo the placement (its GPUs go back) and say why; the job holds nothing meanwhile."""
        metrics.PLACEMENT_FAILURES.labels(refused.reason).inc()
        placement_id = job.placement.id if job.placement is not None else ""
        await self.pods.delete(job.key, [p.name for p in pods_of_placement(self.ctx.state, job.key, placement_id)])
        current = self.writer.current(job)
        now = utc(self.ctx.clock.time())
        await self.writer.patch(current, transitions.dropped(current, refused.reason, refused.message, now))
        await self.events.warning(job, refused.reason, refused.message)


def _refused(e: ApiException, plural: str, name: str) -> CreateRefused | None:
    """A create the API server refused, as the reason the gang waits with (None: not a refusal)."""
    message = _api_message(e)
    if e.status == 403 and "because it is being terminated" in message:  # the NamespaceLifecycle admission
        return CreateRefused(PlacedReason.NAMESPACE_TERMINATING, f"{plural[:-1]} {name}: {message}")
    if e.status == 403 and "exceeded quota" in message:  # a ResourceQuota: retried, not the spec's fault
        return CreateRefused(PlacedReason.QUOTA_EXCEEDED, f"{plural[:-1]} {name}: {message}; retried in "
                             f"{QUOTA_RETRY_SECONDS:.0f}s")
    if e.status in (400, 403, 422):
        return CreateRefused(PlacedReason.INVALID_SPEC, f"{REFUSED_PREFIX} {plural[:-1]} {name}: {message}")
    return None


def _api_message(e: ApiException) -> str:
    try:
        return json.loads(e.body or "{}").get("message") or str(e.reason)
    except ValueError:
        return str(e.reason)
