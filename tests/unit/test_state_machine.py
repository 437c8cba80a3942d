"""A stateful property test of the state + decision core (hypothesis RuleBasedStateMachine).

The in-memory API records every change as a watch event; the machine delivers those events to the
operator's state late, out of order, twice, or never; re-lists; restarts the operator; lets
kube-scheduler bind released pods; and runs placement iterations. Invariants, checked against the
API's objects (the truth), after every step:
- no GPU is held by two live pods;
- no gang is partly released: a pod of a placement is ungated only if every pod of it exists;
- no job is Failed: nothing in this world ever fails (no pod is deleted behind its back); gangs of a
  high PriorityClass preempt gangs of a low one (a preempted gang is requeued, never failed), and
  migratable gangs are moved so waiting ones fit (defragmentation on).
"""

from __future__ import annotations

import asyncio
import copy
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from railyard.operator.act.loop import PlacementLoop
from railyard.operator.base.keys import ANNOTATION_PLACEMENT_ID, SCHEDULING_GATE
from railyard.operator.cache.state import KINDS, ClusterState
from railyard.topology.cluster.nodes import parse_gpu_annotation, pinned_node

from tests.support import status as cond
from tests.support.clock import ManualClock
from tests.support.clusters import profile_nodes
from tests.support.fakeapi import FakeApi
from tests.support.jobs import make_job
from tests.support.settings import settings as operator_settings

SHAPES = [(1, 8), (2, 8), (3, 4), (2, 2), (4, 1), (5, 8)]


class OperatorUnderChaos(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.api = FakeApi(profile_nodes(leaves=1, tors=2, nodes=3))
        for name, value in (("low", 10), ("high", 1000)):  # gangs of "high" preempt gangs of "low"
            self.api._store("priorityclasses", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                "metadata": {"name": name}, "value": value}, "ADDED")
        self.pending: list = []  # watch events not yet delivered, in API order
        self.delivered: list = []
        self.jobs = 0
        # The operator's time is the machine's: hypothesis replays a case only if every decision is a
        # function of the steps (preemption weighs work lost by time; back-offs and holds count seconds).
        self.clock = ManualClock()
        self._restart()

    def teardown(self) -> None:
        self.loop.close()

    def _restart(self) -> None:
        """A fresh operator: lists everything, then watches."""
        self.state = ClusterState(clock=self.clock)
        for kind in KINDS:
            items, rv = self.api.listing(kind)
            self.state.replace(kind, items, rv)
        self.pending = []
        self.api.log.clear()
        # Defragmentation on, so migratable gangs are moved too (checkpoint-then-restart) under the chaos.
        settings = operator_settings(defragmentation=True, loss_debounce_seconds=0)
        self.placer = PlacementLoop(self.state, self.api, settings, lambda: True, clock=self.clock)

    def _collect(self) -> None:
        self.pending.extend(self.api.log)
        self.api.log.clear()

    def _deliver(self, event) -> None:
        kind, type_, obj = event
        self.state.apply(kind, type_, obj)
        self.delivered.append(event)

    # --- the world ---------------------------------------------------------------------------------

    @initialize(count=st.integers(0, 6), migratable=st.booleans())
    def low_priority_jobs_fill_the_cluster(self, count: int, migratable: bool) -> None:
        """A cluster busy with low-priority one-node gangs, so a "high" gang has someone to preempt (or,
        once some are gone, to move)."""
        for _ in range(count):
            self.create_job((1, 8), "low", None, migratable)

    @rule(shape=st.sampled_from(SHAPES), class_name=st.sampled_from([None, "low", "high"]),
          tier=st.sampled_from([None, "tor"]), migratable=st.booleans())
    def create_job(self, shape: tuple[int, int], class_name: str | None, tier: str | None,
                   migratable: bool = False) -> None:
        replicas, gpus = shape
        body = make_job(f"job-{self.jobs}", replicas, gpus=gpus, topology={"requiredTier": tier} if tier else None,
                        preemption={"migratable": migratable})
        if class_name:
            body["spec"]["priorityClassName"] = class_name
        self.api.create_job(body)
        self.jobs += 1
        self._collect()

    @precondition(lambda self: self.api.objects["trainingjobs"])
    @rule(data=st.data())
    def delete_job(self, data) -> None:
        key = data.draw(st.sampled_from(sorted(self.api.objects["trainingjobs"])))
        self.api.delete_job(*key)
        self._collect()

    @rule()
    def a_gang_in_each_tor_finishes(self) -> None:
        """Departures that fragment the cluster: in each TOR the first one-node gang there is deleted."""
        tor_of = {n: obj["metadata"]["labels"].get("topology.railyard.dev/tor")
                  for (_, n), obj in self.api.objects["nodes"].items()}
        chosen: dict[str, tuple[str, str]] = {}
        for (namespace, _), pod in sorted(self.api.objects["pods"].items()):
            job = pod["metadata"]["labels"].get("railyard.dev/job-name")
            key = (namespace, job)
            body = self.api.objects["trainingjobs"].get(key)
            tor = tor_of.get(pod["spec"].get("nodeName") or "")
            if body is not None and body["spec"]["replicas"] == 1 and tor and tor not in chosen:
                chosen[tor] = key
        for key in set(chosen.values()):
            self.api.delete_job(*key)
        self._collect()

    @rule()
    def kube_scheduler_binds(self) -> None:
        self.api.bind_released()
        self._collect()

    @rule(data=st.data(), faulty=st.booleans())
    def a_gpu_fault_comes_or_goes(self, data, faulty: bool) -> None:
        """A health agent sets (or clears) a GPU fault condition: gangs there restart elsewhere."""
        name = data.draw(st.sampled_from(sorted(n for _, n in self.api.objects["nodes"])))
        node = copy.deepcopy(self.api.objects["nodes"][("", name)])
        conditions = [c for c in node["status"].get("conditions") or [] if c["type"] != "GpuNvlinkWatch"]
        if faulty:
            conditions.append({"type": "GpuNvlinkWatch", "status": "True", "message": "NVLink down",
                               "lastTransitionTime": "2026-01-01T00:00:00Z"})
        node["status"]["conditions"] = conditions
        self.api._store("nodes", node, "MODIFIED")
        self._collect()

    @rule()
    def kubelets_finish_terminating(self) -> None:
        self.api.finish_terminating()
        self._collect()

    # --- the watch ---------------------------------------------------------------------------------

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def deliver_in_order(self, data) -> None:
        count = data.draw(st.integers(1, len(self.pending)))
        for event in self.pending[:count]:
            self._deliver(event)
        del self.pending[:count]

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def deliver_out_of_order(self, data) -> None:
        index = data.draw(st.integers(0, len(self.pending) - 1))
        self._deliver(self.pending.pop(index))

    @precondition(lambda self: self.delivered)
    @rule(data=st.data())
    def deliver_a_duplicate(self, data) -> None:
        self._deliver(data.draw(st.sampled_from(self.delivered[-20:])))

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def drop_an_event(self, data) -> None:
        self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))

    @rule(kind=st.sampled_from(KINDS))
    def relist(self, kind: str) -> None:
        """A watch restart: the reflector lists again (Replace) and watches from the list's version."""
        items, rv = self.api.listing(kind)
        self.state.replace(kind, items, rv)
        self.pending = [e for e in self.pending if e[0] != kind]

    @rule()
    def operator_restarts(self) -> None:
        self._restart()

    # --- the operator ------------------------------------------------------------------------------

    @rule()
    def placement_iteration(self) -> None:
        self.clock.advance(1.0)  # a pass a second
        self.loop.run_until_complete(self.placer.run_once())
        self._collect()

    # --- invariants (on the API's objects) -----------------------------------------------------------

    @invariant()
    def no_gpu_double_booked(self) -> None:
        held: Counter = Counter()
        for pod in self.api.objects["pods"].values():
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            node = pod["spec"].get("nodeName") or pinned_node(pod["spec"])
            for gpu in parse_gpu_annotation(pod["metadata"]["annotations"]["railyard.dev/gpus"]):
                held[(node, gpu)] += 1
        assert not [k for k, v in held.items() if v > 1], held

    @invariant()
    def no_gang_partly_released(self) -> None:
        by_placement: dict[str, list] = {}
        for pod in self.api.objects["pods"].values():
            by_placement.setdefault(pod["metadata"]["annotations"][ANNOTATION_PLACEMENT_ID], []).append(pod)
        jobs = {j["status"]["placement"]["id"]: j for j in self.api.objects["trainingjobs"].values()
                if (j.get("status") or {}).get("placement")}
        for pid, pods in by_placement.items():
            released = [p for p in pods if not any(g["name"] == SCHEDULING_GATE
                                                   for g in p["spec"].get("schedulingGates") or [])]
            if released and pid in jobs:
                assert len(pods) == len(jobs[pid]["status"]["placement"]["ranks"]), \
                    f"placement {pid}: {len(released)} released while {len(pods)} pods exist"

    @invariant()
    def no_job_failed_without_a_failure(self) -> None:
        for job in self.api.objects["trainingjobs"].values():
            conditions = (job.get("status") or {}).get("conditions")
            assert not cond.is_true(conditions, cond.FAILED), cond.get(conditions, cond.FAILED)


OperatorUnderChaos.TestCase.settings = settings(max_examples=100, stateful_step_count=60, deadline=None,
                                                suppress_health_check=[HealthCheck.too_slow])
TestOperatorUnderChaos = OperatorUnderChaos.TestCase


def test_a_fragmented_cluster_defragments_and_a_busy_one_preempts_with_the_invariants_holding():
    """The paths random runs reach rarely, driven on purpose through the same machine: departures fragment
    the TORs, a TOR gang has a migratable gang moved, then a high gang preempts; every step is checked."""
    machine = OperatorUnderChaos()

    def settle(passes: int = 3) -> None:
        for _ in range(passes):
            if machine.pending:
                machine.deliver_in_order(_All(len(machine.pending)))
            for step in (machine.placement_iteration, machine.kubelets_finish_terminating,
                         machine.kube_scheduler_binds):
                step()
                for check in (machine.no_gpu_double_booked, machine.no_gang_partly_released,
                              machine.no_job_failed_without_a_failure):
                    check()

    try:
        for _ in range(6):
            machine.create_job((1, 8), "low", None, True)
        settle()
        machine.a_gang_in_each_tor_finishes()
        settle()
        machine.create_job((2, 8), "low", "tor", False)
        settle(5)
        jobs = machine.api.objects["trainingjobs"].values()
        restarts = [(j.get("status") or {}).get("lastRestart") or {} for j in jobs]
        assert any(r.get("reason") == "Migration" for r in restarts), "a gang was moved"
        machine.create_job((3, 8), "high", "tor", False)
        settle(5)
        conditions = [c for j in machine.api.objects["trainingjobs"].values()
                      for c in (j.get("status") or {}).get("conditions") or []]
        assert any(c["type"] == "Preempted" and c["status"] == "True" for c in conditions), "a gang was preempted"
    finally:
        machine.teardown()


class _All:
    """A stand-in for hypothesis' data: draws deliver every pending event."""

    def __init__(self, count: int) -> None:
        self.count = count

    def draw(self, _strategy: object) -> int:
        return self.count
