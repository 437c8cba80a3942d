"""Where features meet, with gangs Railyard places but does not own (issue 46): the interaction model of
test_interactions.py (preemption, defragmentation, spares, drains, DRA, faults, reservations, leader changes) with
JobSets beside the TrainingJobs, their owners behaving as their controllers do — a pod deleted (preempted, evicted
by a drain, its node's pods gone) is made again, gated, under a new name; a JobSet deleted takes its pods and its
gang's TrainingJob with it. The invariants are the model's: no GPU in two live placements or held by two jobs'
pods, nothing Failed, holds and reservations ending with their reason — and one more: after a pass, an adopted
gang's pod is never released unless its gang's placement names it."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from railyard.operator.base.keys import SCHEDULING_GATE

from tests.support.workloads import fresh_pod, jobset_pods
from tests.unit.test_interactions import FeaturesMeet


class AdoptedMeet(FeaturesMeet):
    def __init__(self) -> None:
        super().__init__()
        self.jobsets: dict[str, dict[str, dict[str, Any]]] = {}  # JobSet -> its pods' slots (Job/index -> pod)

    @rule(replicas=st.integers(1, 3), class_name=st.sampled_from(["low", "high"]))
    def a_jobset_is_created(self, replicas: int, class_name: str) -> None:
        name = f"js-{self.jobs}"
        self.jobs += 1
        names = jobset_pods(self.r, name, jobs=1, parallelism=replicas, priority_class=class_name,
                            **({"railyard.dev/required-tier": "tor"} if replicas > 1 else {}))
        self.jobsets[name] = {n.rsplit("-", 1)[0]: self.r.api.objects["pods"][("default", n)] for n in names}
        self.done()

    @precondition(lambda self: self._missing())
    @rule()
    def owners_make_their_pods_again(self) -> None:
        """The Job controller makes every pod its JobSet is missing, gated, under a new name."""
        for jobset, slot in self._missing():
            old = self.jobsets[jobset][slot]
            pod = fresh_pod(old, f"{slot}-{self.jobs}")
            self.jobs += 1
            self.r.api._store("pods", pod, "ADDED")
            self.jobsets[jobset][slot] = pod
        self.done()

    @precondition(lambda self: self.jobsets)
    @rule(data=st.data())
    def a_jobset_is_deleted(self, data: st.DataObject) -> None:
        """Its pods go (Terminating on a graceful kubelet) and the garbage collector takes its gang's TrainingJob."""
        name = data.draw(st.sampled_from(sorted(self.jobsets)))
        for pod in self.jobsets.pop(name).values():
            key = ("default", pod["metadata"]["name"])
            if key in self.r.api.objects["pods"]:
                self.r.api._remove("pods", key)
        for key, body in list(self.r.api.objects["trainingjobs"].items()):
            if (body["spec"].get("adopt") or {}).get("name") == name:
                self.r.api.delete_job(*key)
        self.done()

    def _missing(self) -> list[tuple[str, str]]:
        pods = self.r.api.objects["pods"]
        return [(jobset, slot) for jobset, slots in sorted(self.jobsets.items()) for slot, pod in sorted(slots.items())
                if ("default", pod["metadata"]["name"]) not in pods]

    @invariant()
    def an_adopted_pod_is_released_only_where_its_gang_is_placed(self) -> None:
        if not self.passed:  # a gang's TrainingJob deleted by hand is made again on the next pass
            return
        named = {r.get("podUid") for j in self.r.api.objects["trainingjobs"].values() if j["spec"].get("adopt")
                 for r in ((j.get("status") or {}).get("placement") or {}).get("ranks") or []}
        for slots in self.jobsets.values():
            for pod in slots.values():
                live = self.r.api.objects["pods"].get(("default", pod["metadata"]["name"]))
                if live is None or live["metadata"].get("deletionTimestamp"):
                    continue
                gated = any(g["name"] == SCHEDULING_GATE for g in live["spec"].get("schedulingGates") or [])
                assert gated or live["metadata"]["uid"] in named, \
                    f"{live['metadata']['name']}: released, but no placement names it"


AdoptedMeet.TestCase.settings = settings(max_examples=60, stateful_step_count=50, deadline=None,
                                         report_multiple_bugs=False,
                                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestAdoptedMeet = AdoptedMeet.TestCase
