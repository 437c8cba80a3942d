"""Keeps a TrainingJob for each gang of a workload Railyard places without owning it (decide/adoption.py): once a
gang's pods opted in (Railyard's gate) and its size is known — from the pods (an LWS group, a labelled pod
group) or read once from the owner's spec (a JobSet's replicated jobs, a Job's parallelism, a PodGroup's
minCount) — the TrainingJob is created, owned by the workload (gone with it). From then on the gang is queued and
placed as a TrainingJob; act/materialiser.py pins and ungates its pods instead of creating any. A gang's
TrainingJob deleted by hand while its placed pods run on (their owner lives) is made again with its spec and
status: its placement is what counts those pods' GPUs and what a re-made pod is placed next to."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from railyard.operator.act.actor_context import Context
from railyard.operator.base.objects import Key
from railyard.operator.decide.adoption import adopted_job, adopted_name
from railyard.topology.cluster.workload_groups import GroupMember, WorkloadKind, jobset_offsets, pytorchjob_offsets

log = logging.getLogger("railyard.adoption")


class Adoption:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        # (namespace, group) -> (size, JobSet offsets), read once; None: the owner could not tell (yet)
        self._sizes: dict[Key, tuple[int, dict[int, int] | None] | None] = {}
        self._placed: dict[Key, Mapping[str, Any]] = {}  # each placed adopted gang's TrainingJob, as last seen

    async def run(self) -> None:
        """A TrainingJob for every gang with an opted-in pod that has none."""
        await self._restore_deleted()
        state = self.ctx.state
        groups = state.groups
        for gone in [g for g in self._sizes if g not in set(groups)]:
            del self._sizes[gone]
        for namespace, group in groups:
            pods = state.group_pods(namespace, group)
            gated = [p for p in pods if p.gated and p.member is not None and not p.terminating]
            if not gated:
                continue
            member = gated[0].member
            assert member is not None
            if (namespace, adopted_name(member)) in state.jobs:
                continue
            try:
                await self._adopt(namespace, group, member, gated[0].name)
            except Exception as e:  # one gang's trouble is that gang's: the others go on
                log.warning("gang %s/%s (%s %s): not adopted: %s", namespace, group, member.kind, member.name, e)

    async def _restore_deleted(self) -> None:
        state = self.ctx.state
        for key, job in state.jobs.items():
            if job.spec is not None and job.spec.adopt is not None and job.placement is not None:
                self._placed[key] = job.body
        for key, body in list(self._placed.items()):
            now = state.jobs.get(key)
            if now is not None and now.placement is not None:
                continue
            if (now is not None and now.uid == body["metadata"].get("uid")) or not self._runs(key[0], body):
                del self._placed[key]  # its placement given back, or its pods gone: nothing to restore
                continue
            try:
                if await self._restore(key, body, now is None):
                    del self._placed[key]
            except Exception as e:  # tried again next pass
                log.warning("job %s/%s: deleted while its gang runs; not restored yet: %s", *key, e)

    def _runs(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """Whether a pod the placement names still runs released (not gated, not ending)."""
        status = body.get("status") or {}
        uids = {r.get("podUid") for r in (status.get("placement") or {}).get("ranks") or []}
        group = body["spec"]["adopt"]["group"]
        return any(p.uid in uids and not p.gated and not p.terminating and not p.finished
                   for p in self.ctx.state.group_pods(namespace, group))

    async def _restore(self, key: Key, body: Mapping[str, Any], create: bool) -> bool:
        if create:
            meta = body["metadata"]
            fresh = {"apiVersion": body["apiVersion"], "kind": body["kind"], "spec": body["spec"],
                     "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "ownerReferences")
                                  if k in meta}}
            await self.ctx.api.create("trainingjobs", fresh)
        written = await self.ctx.api.patch_job_status(*key, dict(body.get("status") or {}))
        if written is not None:
            log.warning("job %s/%s: deleted while its gang's pods run; made again with its placement", *key)
        return written is not None

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
        created, _ = await self.ctx.api.create("trainingjobs", body)
        if created:
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
