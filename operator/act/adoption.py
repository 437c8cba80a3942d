"""Keeps a TrainingJob for each gang of a workload Railyard places without owning it (decide/adoption.py): once a
gang's pods opted in (Railyard's gate) and its size is known — from the pods (an LWS group, a labelled pod
group) or read once from the owner's spec (a JobSet's replicated jobs, a Job's parallelism, a PodGroup's
minCount) — the TrainingJob is created, owned by the workload (gone with it). From then on the gang is queued and
placed as a TrainingJob; act/materialiser.py pins and ungates its pods instead of creating any. A gang's
TrainingJob deleted by hand while its placed pods run on is made again, and the placement they run under read back
from them (RestorePlacement): it is what counts those pods' GPUs and what a re-made pod is placed next to; this
needs no memory, so a new leader does it too."""

from __future__ import annotations

import logging

from railyard.operator.act.actor_context import Context
from railyard.operator.act.events import Events
from railyard.operator.act.writer import StatusWriter
from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job, Key
from railyard.operator.base.reasons import EventReason
from railyard.operator.cache.state_views import node_models
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.actions import RestorePlacement
from railyard.operator.decide.adoption import adopted_job, adopted_name
from railyard.operator.decide.priority import ranked_priority
from railyard.topology.cluster.workload_groups import GroupMember, WorkloadKind, jobset_offsets, pytorchjob_offsets
from railyard.topology.solver.placement import Placement

log = logging.getLogger("railyard.adoption")


class Adoption:
    def __init__(self, ctx: Context, writer: StatusWriter, events: Events) -> None:
        self.ctx = ctx
        self.writer = writer
        self.events = events
        # (namespace, group) -> (size, JobSet offsets), read once; None: the owner could not tell (yet)
        self._sizes: dict[Key, tuple[int, dict[int, int] | None] | None] = {}

    async def run(self) -> None:
        """A TrainingJob for every gang with an opted-in pod that has none."""
        state = self.ctx.state
        groups = state.groups
        for gone in [g for g in self._sizes if g not in set(groups)]:
            del self._sizes[gone]
        for namespace, group in groups:
            pods = state.group_pods(namespace, group)
            # Gated pods, or pods Railyard placed whose TrainingJob is gone (deleted by hand: made again).
            gated = [p for p in pods if p.member is not None and not p.terminating and not p.finished
                     and (p.gated or p.placement_id)]
            if not gated:
                continue
            member = gated[0].member
            assert member is not None
            if (namespace, adopted_name(member)) in state.jobs:
                continue
            try:
                if not any(p.gated for p in gated) and not await self._owner_lives(namespace, member):
                    continue  # its workload is being deleted (the collector took the TrainingJob first)
                await self._adopt(namespace, group, member, gated[0].name)
            except Exception as e:  # one gang's trouble is that gang's: the others go on
                log.warning("gang %s/%s (%s %s): not adopted: %s", namespace, group, member.kind, member.name, e)

    async def restore(self, job: Job, action: RestorePlacement) -> None:
        """Record the placement the gang's released pods run under, read back from them (their nodes and GPUs):
        its TrainingJob was deleted by hand and made again; until then their GPUs counted only by request."""
        state = self.ctx.state
        models = node_models(state)  # a cordoned or draining node too: the pods run there
        views = [state.pods.get((job.namespace, name)) for name, _ in action.pods]
        if any(v is None or v.uid != uid for v, (_, uid) in zip(views, action.pods, strict=True)):
            return  # a pod changed since the pass decided: the next one decides again
        usage = [v.usage for v in views if v is not None]
        if any(u is None or u.node not in models for u in usage):
            return  # a node never seen: nothing to record
        replicas = [(models[u.node], tuple(u.gpu_indices)) for u in usage if u is not None]
        placement = Placement.from_replicas(replicas, state.scheme.levels)
        placement_id = (views[0].placement_id if views[0] is not None else None) or ""
        priority = ranked_priority(job, state.priority_classes)
        patch = transitions.placing(job, placement, placement_id, utc(self.ctx.clock.time()), priority,
                                    list(action.pods))
        if await self.writer.patch(job, patch) is not None:
            message = (f"its TrainingJob was deleted while its {len(action.pods)} pods ran: made again with the "
                       f"placement they run under (placement {placement_id})")
            log.warning("job %s/%s: %s", *job.key, message)
            await self.events.warning(job, EventReason.PLACEMENT_RESTORED, message)

    async def _owner_lives(self, namespace: str, member: GroupMember) -> bool:
        """Whether the gang's workload still exists, not being deleted (read now, never cached)."""
        owner = member.owner
        if owner is None or not owner.uid:
            return True
        group, _, version = owner.api_version.rpartition("/")
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        body = await self.ctx.api.read(f"{base}/namespaces/{namespace}/{owner.kind.lower()}s/{owner.name}")
        meta = (body or {}).get("metadata") or {}
        return meta.get("uid") == owner.uid and not meta.get("deletionTimestamp")

    async def _adopt(self, namespace: str, group: str, member: GroupMember, pod_name: str) -> None:
        key = (namespace, group)
        if key not in self._sizes:
            self._sizes[key] = await self._size(namespace, member)
        sized = self._sizes[key]
        if sized is None:
            return
        size, offsets = sized
        pod = await self.ctx.api.read(f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
        if pod is None:
            return
        body = adopted_job(member, size, pod, namespace, self.ctx.state.scheme.tier_of_label())
        if offsets is not None:
            body["spec"]["adopt"]["offsets"] = [offsets[i] for i in sorted(offsets)]
        created, stored = await self.ctx.api.create("trainingjobs", body)
        if created and stored is not None:
            self.ctx.state.apply_job("ADDED", stored)  # decided on in this pass (its watch event follows)
            log.info("gang %s/%s (%s %s, %d pods) adopted as TrainingJob %s", namespace, group, member.kind,
                     member.name, size, body["metadata"]["name"])

    async def _size(self, namespace: str, member: GroupMember) -> tuple[int, dict[int, int] | None] | None:
        """The gang's size (and a JobSet's Job offsets), from the pod or its owner's spec."""
        if member.size is not None:
            return member.size, None
        owner = member.owner
        if member.kind is WorkloadKind.JOBSET and owner is not None:
            jobset = await self.ctx.api.read(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/"
                                             f"{owner.name}")
            if jobset is None or (jobset.get("metadata") or {}).get("uid") != owner.uid:
                return None
            size, offsets = jobset_offsets(jobset)
            return size, offsets
        if member.kind is WorkloadKind.PYTORCH_JOB and owner is not None:
            job = await self.ctx.api.read(f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{owner.name}")
            if job is None or (job.get("metadata") or {}).get("uid") != owner.uid:
                return None
            return pytorchjob_offsets(job)
        if member.kind is WorkloadKind.JOB:
            job = await self.ctx.api.read(f"/apis/batch/v1/namespaces/{namespace}/jobs/{member.name}")
            if job is None:
                return None
            parallelism = (job.get("spec") or {}).get("parallelism")
            return (int(parallelism) if parallelism is not None else 1), None
        if owner is not None and owner.kind == "PodGroup":
            group = await self.ctx.api.read(f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/podgroups/"
                                            f"{owner.name}")
            count = (((group or {}).get("spec") or {}).get("schedulingPolicy") or {}).get("gang", {}).get("minCount")
            return (int(count), None) if count else None
        log.warning("gang %s/%s: its pods do not say how many they are (label %s)", namespace, member.name,
                    "railyard.dev/pod-group-size")
        return None
