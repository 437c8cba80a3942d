"""One decision, one place: the offline planner (`railyard plan`) and the operator place the same jobs
on the same cluster identically — inter-pod rules against existing pods and against gangs placed
before them, other resources of gangs placed before them — because both call
railyard.topology.solver.decision.decide. (Before, the planner ignored inter-pod rules and the requests of
earlier gangs: it put a job with TOR anti-affinity next to a matching pod.)"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from railyard.operator.act.loop import PlacementLoop
from railyard.operator.cache.state import KINDS, ClusterState
from railyard.topology.api.job import TrainingJob
from railyard.topology.cluster.labels import LABEL_TOR
from railyard.topology.cluster.nodes import build_snapshot
from railyard.topology.planner.plan import plan
from railyard.topology.solver.decision import pod_infos

from tests.support.clusters import profile_nodes
from tests.support.fakeapi import FakeApi
from tests.support.jobs import make_job
from tests.support.settings import settings as operator_settings


def _anti_affinity(selector: dict[str, str], key: str = LABEL_TOR) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": selector}, "topologyKey": key}]}}


def _job(name: str, replicas: int, gpus: int = 8, labels: dict[str, str] | None = None,
         affinity: dict[str, Any] | None = None, cpu: str | None = None) -> dict[str, Any]:
    body = make_job(name, replicas, gpus=gpus)
    body["metadata"]["namespace"] = "default"
    template = body["spec"]["template"]
    template["metadata"]["labels"] = labels or {}
    if affinity:
        template["spec"]["affinity"] = affinity
    if cpu:
        template["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    return body


def _pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
            "status": {"phase": "Running"}}


def _planned(nodes: list[dict], pods: list[dict], jobs: list[dict]) -> dict[str, dict[int, str] | None]:
    result = plan(build_snapshot(nodes, pods), [TrainingJob.model_validate(j) for j in jobs], pod_infos(pods))
    return {d.request.name: ({r.rank: r.node for r in d.placement.replicas} if d.placement else None)
            for d in result.decisions}


def _operated(nodes: list[dict], pods: list[dict], jobs: list[dict]) -> dict[str, dict[int, str] | None]:
    api = FakeApi(nodes)
    for pod in pods:
        api._store("pods", copy.deepcopy(pod), "ADDED")
    for job in jobs:
        api.create_job(job)
    state = ClusterState()
    for kind in KINDS:
        items, rv = api.listing(kind)
        state.replace(kind, items, rv)
    asyncio.run(PlacementLoop(state, api, operator_settings(), lambda: True).run_once())
    out: dict[str, dict[int, str] | None] = {}
    for job in jobs:
        status = api.objects["trainingjobs"][("default", job["metadata"]["name"])].get("status") or {}
        ranks = (status.get("placement") or {}).get("ranks")
        out[job["metadata"]["name"]] = {r["rank"]: r["node"] for r in ranks} if ranks else None
    return out


NODES = profile_nodes(leaves=1, tors=2, nodes=2, cpu="16")
FIRST_TOR_NODE = sorted(NODES, key=lambda n: n["metadata"]["name"])[0]["metadata"]["name"]
TOR_OF = {n["metadata"]["name"]: n["metadata"]["labels"][LABEL_TOR] for n in NODES}

CASES = {
    # a job whose pods must not share a TOR with team=a's pods, one of which runs already
    "anti-affinity to an existing pod": (
        [_pod("squatter", FIRST_TOR_NODE, {"team": "a"})],
        [_job("a-shy", 2, gpus=4, affinity=_anti_affinity({"team": "a"}))]),
    # the second job must not share a TOR with the first one, placed in the same pass
    "anti-affinity to a gang placed just before": (
        [],
        [_job("a-first", 1, labels={"team": "b"}),
         _job("b-second", 2, gpus=4, affinity=_anti_affinity({"team": "b"}))]),
    # the first gang's cpu requests leave no node of its TOR room for the second gang's
    "cpu of a gang placed just before": (
        [],
        [_job("a-cpu", 2, gpus=1, cpu="12"), _job("b-cpu", 2, gpus=1, cpu="8")]),
    "plain gangs": ([], [_job("a-one", 1), _job("b-two", 2), _job("c-three", 1, gpus=2)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_planner_and_the_operator_place_alike(case: str):
    pods, jobs = CASES[case]
    planned, operated = _planned(NODES, pods, jobs), _operated(NODES, pods, jobs)
    assert planned == operated
    assert all(p is not None for p in planned.values()), planned


def test_the_planner_keeps_a_job_out_of_the_tor_of_a_pod_it_must_avoid():
    pods, jobs = CASES["anti-affinity to an existing pod"]
    placed = _planned(NODES, pods, jobs)["a-shy"]
    assert placed is not None and {TOR_OF[n] for n in placed.values()} != {TOR_OF[FIRST_TOR_NODE]}
    assert TOR_OF[FIRST_TOR_NODE] not in {TOR_OF[n] for n in placed.values()}
