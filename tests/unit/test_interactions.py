"""Where features meet: a stateful property test (hypothesis) of preemption, defragmentation moves, hot spares,
drains (by kubectl's cordon and by an autoscaler's taint, held by the eviction webhook's verdict), elastic
resizes, DRA claims, node faults, starvation reservations and leader changes, interleaved, with the ranks of
running gangs reporting (and saving a step when asked) as real ranks do every few seconds.

The cluster: two TORs of three 8-GPU nodes, GPUs and rail NICs published in ResourceSlices (every replica pod
takes its GPUs through a ResourceClaim that kube-scheduler here allocates only from free devices), one hot spare
per TOR, defragmentation on, starvation after 20 s. Checkpoint waits are made endless, so a planned move
(a drain, a defragmentation move, a preemption) that goes ahead without the step it asked for is a skipped wait,
never a timeout. Invariants, after every step, on the API's objects (the truth):
- no GPU is in two live placements, no GPU held by two live pods, no device allocated to two claims;
- no gang is partly released;
- nothing is Failed (nothing here fails a job);
- no planned move of a gang whose ranks report resumes from anything but the step they saved for it;
- after a pass, no hold is kept for a gang that is gone or placed, or on a node that is no longer usable; no
  reservation holds a node held for another gang, or a spare (for a gang that does not backfill).
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from railyard.operator.act.loop import PlacementLoop
from railyard.operator.base.keys import ANNOTATION_PLACEMENT_ID, SCHEDULING_GATE
from railyard.operator.cache.memory import holds, reservations
from railyard.operator.decide import eviction_review
from railyard.operator.decide.checkpoint_wait import nobody_reports
from railyard.operator.decide.reports import WorkerReport
from railyard.operator.decide.spares import spare_nodes
from railyard.topology.api.timestamps import epoch
from railyard.topology.cluster.dra_devices import allocated, inventory
from railyard.topology.cluster.nodes import parse_gpu_annotation, pinned_node

from tests.support import status as cond
from tests.support.harness import Rig, rig
from tests.support.jobs import make_job

PLANNED = ("Maintenance", "Migration")
FAULT = {"type": "GpuNvlinkWatch", "status": "True", "message": "NVLink down",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}
DRAIN_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def _gpus(pod: dict[str, Any]) -> str:
    """The GPUs Railyard pinned the pod to ("" for an adopted gang's pod not pinned yet)."""
    return str(pod["metadata"].get("annotations", {}).get("railyard.dev/gpus", ""))


class FeaturesMeet(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.r: Rig = rig(nodes=3, tors=2, dra=True, spares_per_tor=1, defragmentation=True, starvation_seconds=20,
                          reservation_seconds=60, preemption_hold_seconds=60, preemption_checkpoint_seconds=1e9,
                          maintenance_checkpoint_seconds=1e9, report_url="https://reports.example:8090/v1/reports")
        for name, value in (("low", 10), ("high", 1000)):
            self.r.api._store("priorityclasses", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                  "metadata": {"name": name}, "value": value}, "ADDED")
        self.r.api.graceful = True  # pods exit in their own time (kubelets_finish_terminating ends them)
        self.r.deliver()
        self.jobs = 0
        self.reporting: set[str] = set()  # jobs whose ranks report through railyard.worker
        self.step = 0  # the ranks' training step (one clock for all: only its order matters)
        self.saved: dict[tuple[str, int], set[int]] = {}  # (job, attempt) -> steps every rank saved
        self.heard: set[tuple[str, int]] = set()  # (job, attempt) that reported
        self.attempts: dict[str, int] = {}  # job -> restartCount last seen
        self.draining: set[str] = set()
        self.evicted: set[str] = set()  # placements a drain evicted a pod of
        self.passed = False  # the last step was a pass: holds and reservations are current

    # --- the world -------------------------------------------------------------------------------------

    @initialize(count=st.integers(2, 5), reporting=st.booleans())
    def low_gangs_fill_the_cluster(self, count: int, reporting: bool) -> None:
        for _ in range(count):
            self.create_job(1, "low", False, False, reporting, False)
        self.settle()

    @rule(replicas=st.integers(1, 4), class_name=st.sampled_from(["low", "high"]), migratable=st.booleans(),
          elastic=st.booleans(), reporting=st.booleans(), backfill=st.booleans(), in_place=st.booleans(),
          limit=st.sampled_from([None, None, 40, 200]))
    def create_job(self, replicas: int, class_name: str, migratable: bool, elastic: bool, reporting: bool,
                   backfill: bool, in_place: bool = False, limit: int | None = None) -> None:
        name = f"job-{self.jobs}"
        self.jobs += 1
        spec: dict[str, Any] = {"preemption": {"migratable": migratable, "backfillSpares": backfill},
                                "checkpoint": {"path": "/c"},
                                "faultPolicy": {"restartStrategy": "InPlace" if in_place else "Recreate"}}
        if elastic:
            spec.update(minReplicas=1, maxReplicas=4)
        if replicas > 1:
            spec["topology"] = {"requiredTier": "tor"}
        if limit is not None:  # a declared run time: ended there, and it may backfill reservations
            spec["timeLimitSeconds"] = limit
        body = make_job(name, replicas, **spec)
        body["spec"]["priorityClassName"] = class_name
        self.r.api.create_job(body)
        if reporting:
            self.reporting.add(name)
        self.done()

    @precondition(lambda self: self.r.api.objects["trainingjobs"])
    @rule(data=st.data())
    def delete_job(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.r.api.objects["trainingjobs"])))
        self.r.api.delete_job(*key)
        self.done()

    @precondition(lambda self: self._elastic())
    @rule(data=st.data(), replicas=st.integers(1, 4))
    def kubectl_scale(self, data: st.DataObject, replicas: int) -> None:
        key = data.draw(st.sampled_from(self._elastic()))
        body = copy.deepcopy(self.r.api.objects["trainingjobs"][key])
        body["spec"]["replicas"] = replicas
        body["metadata"]["generation"] = body["metadata"].get("generation", 1) + 1
        self.r.api._store("trainingjobs", body, "MODIFIED")
        self.done()

    @rule(data=st.data(), faulty=st.booleans())
    def a_gpu_fault_comes_or_goes(self, data: st.DataObject, faulty: bool) -> None:
        name = data.draw(st.sampled_from(self._nodes()))
        node = copy.deepcopy(self.r.api.objects["nodes"][("", name)])
        conditions = [c for c in node["status"].get("conditions") or [] if c["type"] != FAULT["type"]]
        node["status"]["conditions"] = [*conditions, FAULT] if faulty else conditions
        self.r.api._store("nodes", node, "MODIFIED")
        self.done()

    @rule(data=st.data(), by=st.sampled_from(["kubectl", "autoscaler"]))
    def a_drain_begins(self, data: st.DataObject, by: str) -> None:
        """kubectl drain cordons the node; an autoscaler taints it for removal. Then each asks to evict the
        pods there (time_passes retries, as drains do)."""
        name = data.draw(st.sampled_from(self._nodes()))
        node = copy.deepcopy(self.r.api.objects["nodes"][("", name)])
        if by == "kubectl":
            node["spec"]["unschedulable"] = True
        else:
            node["spec"]["taints"] = [*(node["spec"].get("taints") or []), DRAIN_TAINT]
        self.r.api._store("nodes", node, "MODIFIED")
        self.draining.add(name)
        self._evict_on(name)
        self.done()

    @precondition(lambda self: self.draining)
    @rule(data=st.data())
    def the_node_comes_back(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.draining)))
        node = copy.deepcopy(self.r.api.objects["nodes"][("", name)])
        node["spec"].pop("unschedulable", None)
        node["spec"]["taints"] = [t for t in node["spec"].get("taints") or [] if t["key"] != DRAIN_TAINT["key"]]
        self.r.api._store("nodes", node, "MODIFIED")
        self.draining.discard(name)
        self.done()

    @rule()
    def kube_scheduler_binds(self) -> None:
        """Claims are allocated as pinned, from free devices only; a pod binds once its claim is."""
        api = self.r.api
        held = {d for c in api.objects["resourceclaims"].values() for d in allocated(c)}
        devices = inventory(api.objects["resourceslices"].values())
        for (namespace, name), claim in sorted(api.objects["resourceclaims"].items()):
            pod = api.objects["pods"].get((namespace, name))
            if claim.get("status") or pod is None or pod["spec"].get("schedulingGates") or \
                    pod["metadata"].get("deletionTimestamp"):
                continue
            node = pinned_node(pod["spec"])
            gpus = parse_gpu_annotation(pod["metadata"]["annotations"]["railyard.dev/gpus"])
            published = devices.get(node or "")
            if published is None or any(g not in published.gpus for g in gpus):
                continue
            wanted = [published.gpus[g].key for g in gpus] + [nic.key for g in gpus
                                                                 if (nic := published.nic_for(g)) is not None]
            if any(d in held for d in wanted):
                continue
            held.update(wanted)
            results = [{"request": f"r{i}", "driver": d[0], "pool": d[1], "device": d[2]} for i, d in enumerate(wanted)]
            claim = copy.deepcopy(claim)
            claim["status"] = {"allocation": {"devices": {"results": results}}}
            api._store("resourceclaims", claim, "MODIFIED")
        claims = api.objects["resourceclaims"]
        api.bind_released(lambda pod: (pod["metadata"]["namespace"], pod["metadata"]["name"]) not in claims or
                          bool(claims[(pod["metadata"]["namespace"], pod["metadata"]["name"])].get("status")))
        self.done()

    @rule()
    def kubelets_finish_terminating(self) -> None:
        self.r.pods_gone()
        self.done()

    @rule(seconds=st.sampled_from([1.0, 5.0, 30.0]))
    def time_passes(self, seconds: float) -> None:
        """The ranks of running gangs that report do so (and save a step when asked); drains retry their
        evictions, and evict what the webhook no longer holds."""
        self.r.clock.advance(seconds)
        self.step += 10
        for key, body in sorted(self.r.api.objects["trainingjobs"].items()):
            name = key[1]
            status = body.get("status") or {}
            if name not in self.reporting or not cond.is_true(status.get("conditions"), cond.RUNNING):
                continue
            attempt = status.get("restartCount", 0)
            asked = (self.r.loop.book.directives(key).get("checkpoint") or {}).get("step")
            saves = (asked,) if asked is not None and asked <= self.step else ()
            for rank in range(len(status["placement"]["ranks"])):
                self.r.loop.book.record(WorkerReport.model_validate({
                    "namespace": key[0], "job": name, "rank": rank, "restartCount": attempt, "step": self.step,
                    "checkpoints": [{"step": s, "path": f"/c/{s}"} for s in saves]}), self.r.clock.time())
            self.heard.add((name, attempt))
            if saves:
                self.saved.setdefault((name, attempt), set()).update(saves)
        for node in sorted(self.draining):
            self._evict_on(node)
        self.done()

    @rule()
    def the_leader_changes(self) -> None:
        """A new leader: same cluster, blank memory, an empty report book; it starts listening now."""
        successor = PlacementLoop(self.r.state, self.r.api, self.r.loop.ctx.settings, lambda: True,
                                  clock=self.r.clock)
        successor.ctx.listening_since = self.r.clock.monotonic()
        self.r.loop = successor
        self.done()

    @rule()
    def a_pass(self) -> None:
        self.r.step()
        self.done(passed=True)

    # --- helpers ---------------------------------------------------------------------------------------

    def done(self, passed: bool = False) -> None:
        self.r.deliver()
        self.passed = passed
        self._check_restarts()

    def settle(self) -> None:
        for _ in range(3):
            self.a_pass()
            self.kube_scheduler_binds()
            self.a_pass()

    def _nodes(self) -> list[str]:
        return sorted(n for _, n in self.r.api.objects["nodes"])

    def _elastic(self) -> list[tuple[str, str]]:
        return sorted(k for k, b in self.r.api.objects["trainingjobs"].items() if b["spec"].get("maxReplicas"))

    def _evict_on(self, node: str) -> None:
        """The drain's eviction requests for the pods on `node`: the webhook sees each (and holds it, or not)."""
        api, state = self.r.api, self.r.state
        ctx = self.r.loop.ctx
        for (namespace, name), pod in sorted(api.objects["pods"].items()):
            if pod["spec"].get("nodeName") != node or pod["metadata"].get("deletionTimestamp"):
                continue
            view = state.pods.get((namespace, name))
            if view is None or view.job is None:
                continue
            key = (namespace, name)
            ctx.evictions.note(key, self.r.clock.monotonic())
            job = state.jobs.get((namespace, view.job))
            with ctx.book.lock:
                progress = ctx.book.jobs.get((namespace, view.job))
            heard = progress is not None and job is not None and progress.restart_count == job.restart_count
            reports = heard or not nobody_reports(True, self.r.clock.monotonic() - ctx.listening_since,
                                                  ctx.settings.reports.worker_interval_seconds)
            asked = self.r.clock.monotonic() - (ctx.evictions.first_asked(key) or self.r.clock.monotonic())
            verdict = eviction_review.judge(view, job, state.health.get(node), reports, asked,
                                            ctx.settings.maintenance.checkpoint_seconds)
            if not verdict.held:
                self.evicted.add(pod["metadata"]["annotations"][ANNOTATION_PLACEMENT_ID])
                api.evict(namespace, name)

    def _check_restarts(self) -> None:
        """No checkpoint wait skipped: a planned move (or a preemption) of a gang whose ranks reported in that
        attempt resumes from a step they saved for it."""
        for (_, name), body in self.r.api.objects["trainingjobs"].items():
            status = body.get("status") or {}
            attempt = status.get("restartCount", 0)
            before = self.attempts.get(name, 0)
            self.attempts[name] = attempt
            restart = status.get("lastRestart") or {}
            if attempt <= before or (restart.get("reason") not in (*PLANNED, "Preempted")):
                continue
            if (name, before) in self.heard:
                assert restart.get("resumeStep") in self.saved.get((name, before), set()), \
                    f"{name}: {restart.get('reason')} restart from {restart.get('resumeStep')} though its ranks " \
                    f"reported and saved {sorted(self.saved.get((name, before), set()))}: a checkpoint wait skipped"

    # --- invariants --------------------------------------------------------------------------------------

    @invariant()
    def no_gpu_or_device_double_booked(self) -> None:
        placed: Counter = Counter()
        for body in self.r.api.objects["trainingjobs"].values():
            status = body.get("status") or {}
            if status.get("placement") and not cond.is_true(status.get("conditions"), cond.FAILED):
                for rank in status["placement"].get("ranks") or []:
                    placed.update((rank["node"], g) for g in rank["gpus"])
        assert not [k for k, v in placed.items() if v > 1], "two live placements share a GPU"
        # A gang restarted in place has its new pods pinned to GPUs its old, Terminating ones still hold: they
        # wait for them (their claims cannot be allocated before). Two jobs' pods never share a GPU.
        holders: dict[tuple[str, int], set[str]] = {}
        for pod in self.r.api.objects["pods"].values():
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            node = pod["spec"].get("nodeName") or pinned_node(pod["spec"])
            for g in parse_gpu_annotation(_gpus(pod)):
                holders.setdefault((node or "", g), set()).add(pod["metadata"]["labels"]["railyard.dev/job-name"])
        assert not [k for k, v in holders.items() if len(v) > 1], "two jobs' live pods hold a GPU"
        bound: Counter = Counter()
        for pod in self.r.api.objects["pods"].values():
            if pod["spec"].get("nodeName") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                bound.update((pod["spec"]["nodeName"], g) for g in parse_gpu_annotation(_gpus(pod)))
        assert not [k for k, v in bound.items() if v > 1], "two bound pods hold a GPU"
        devices = Counter(d for c in self.r.api.objects["resourceclaims"].values() for d in allocated(c))
        assert not [k for k, v in devices.items() if v > 1], "two claims hold a device"

    @invariant()
    def no_gang_partly_released(self) -> None:
        by_placement: dict[str, list] = {}
        for pod in self.r.api.objects["pods"].values():
            if (pid := pod["metadata"]["annotations"].get(ANNOTATION_PLACEMENT_ID)) is not None:
                by_placement.setdefault(pid, []).append(pod)
        # An adopted gang's re-made pods are released alone, next to the survivors (docs/workloads.md).
        jobs = {j["status"]["placement"]["id"]: j for j in self.r.api.objects["trainingjobs"].values()
                if (j.get("status") or {}).get("placement") and not j["spec"].get("adopt")}
        for pid, pods in by_placement.items():
            released = [p for p in pods if not any(g["name"] == SCHEDULING_GATE
                                                   for g in p["spec"].get("schedulingGates") or [])]
            if released and pid in jobs and pid not in self.evicted:  # a drain took a pod after the release
                assert len(pods) == len(jobs[pid]["status"]["placement"]["ranks"]), f"placement {pid} partly released"

    @invariant()
    def nothing_failed_nor_errored(self) -> None:
        """Nothing fails but at its declared time limit, and never before it."""
        for body in self.r.api.objects["trainingjobs"].values():
            status = body.get("status") or {}
            conditions = status.get("conditions") or []
            failed = cond.get(conditions, cond.FAILED)
            if failed is not None and failed.get("status") == "True" and failed.get("reason") == "TimeLimitExceeded":
                limit, placed_at = body["spec"].get("timeLimitSeconds"), epoch(status.get("placedAt"), 0.0)
                assert limit is not None and self.r.clock.time() >= placed_at + limit, f"ended early: {failed}"
                continue
            assert not cond.is_true(conditions, cond.FAILED), failed
        errors = [e["message"] for e in self.r.api.posted_events if e["reason"] == "InternalError"]
        assert not errors, f"the operator failed on a job: {errors}"

    @invariant()
    def holds_and_reservations_end_with_their_reason(self) -> None:
        if not self.passed:
            return
        ctx, state = self.r.loop.ctx, self.r.state
        snapshot = state.snapshot()
        kept = holds(ctx.memories, state.jobs)
        for key, hold in kept.items():
            job = state.jobs[key]
            if hold.spare:
                continue
            assert job.placement is None, f"{key}: a hold kept for a placed gang"
            assert all(snapshot.has_node(n) for n in hold.nodes), f"{key}: a hold on a node no longer usable"
        spares = spare_nodes(snapshot, ctx.settings.spares.per_tor)
        for key, nodes in reservations(ctx.memories, state.jobs).items():
            others = frozenset().union(*(h.nodes for k, h in kept.items() if k != key))
            assert not nodes & others, f"{key}: its reservation holds nodes held for another gang"
            job = state.jobs[key]
            if not (job.spec is not None and job.spec.preemption.backfill_spares):
                assert not nodes & spares, f"{key}: its reservation holds a hot spare"


FeaturesMeet.TestCase.settings = settings(max_examples=60, stateful_step_count=50, deadline=None,
                                          report_multiple_bugs=False,
                                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestFeaturesMeet = FeaturesMeet.TestCase


class _Drawn:
    """Stands in for hypothesis's `data` in a replayed sequence: it gives the values the sequence drew."""

    def __init__(self, value: object) -> None:
        self.value = value

    def draw(self, strategy: object) -> object:
        return self.value


def test_a_backfill_that_takes_a_tors_spare_moves_no_reservation_onto_the_new_spare() -> None:
    """A counterexample the model found, replayed: a backfilling job took the spare its TOR kept, another free node
    of that TOR became the spare, and a starving gang's reservation chosen before kept holding it."""
    m = FeaturesMeet()
    checks = (m.no_gpu_or_device_double_booked, m.no_gang_partly_released, m.nothing_failed_nor_errored,
              m.holds_and_reservations_end_with_their_reason)

    def step(rule: Any, *args: object, **kwargs: object) -> None:
        rule(*args, **kwargs)
        for check in checks:
            check()

    def low(replicas: int, backfill: bool = False) -> None:
        step(m.create_job, replicas=replicas, class_name="low", migratable=False, elastic=False, reporting=False,
             backfill=backfill)

    step(m.low_gangs_fill_the_cluster, count=3, reporting=False)
    for _ in range(3):
        step(m.a_pass)
    step(m.a_gpu_fault_comes_or_goes, _Drawn("gpu-0001"), faulty=True)
    for _ in range(7):
        step(m.a_pass)
    low(1)
    step(m.a_pass)
    low(1, backfill=True)
    step(m.kubelets_finish_terminating)
    step(m.a_gpu_fault_comes_or_goes, _Drawn("gpu-0000"), faulty=False)
    low(4)
    step(m.a_gpu_fault_comes_or_goes, _Drawn("gpu-0000"), faulty=False)
    step(m.delete_job, _Drawn(("default", "job-2")))
    step(m.kube_scheduler_binds)
    step(m.kube_scheduler_binds)
    low(2)
    step(m.delete_job, _Drawn(("default", "job-0")))
    for _ in range(18):
        step(m.a_pass)
    low(1, backfill=True)
    step(m.a_pass)
    m.teardown()
