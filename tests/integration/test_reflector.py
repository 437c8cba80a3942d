"""The reflector against the real API server: paged initial list, readiness only after every kind
is listed, Replace semantics after the watch was down, and a re-list on 410 Gone."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from kubernetes import client
from railyard.operator.cache.state import KINDS, ClusterState
from railyard.operator.kube.client import KubeApi
from railyard.operator.kube.reflector import Reflector, reflector_sink

from tests.support.jobs import create_job, delete_job, make_job

pytestmark = pytest.mark.e2e


async def until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def start(state: ClusterState, kubeconfig: str) -> list[Reflector]:
    loop = asyncio.get_running_loop()
    sink = reflector_sink(state, lambda: None)
    reflectors = [Reflector(KubeApi(workers=1, kubeconfig=kubeconfig), kind, sink, loop, page_size=7,
                            watch_seconds=5) for kind in KINDS]
    for r in reflectors:
        r.start()
    return reflectors


def test_reflectors_list_watch_and_forget_what_vanished_while_down(kubeconfig, crds, core, custom, namespace):
    node_name = f"reflector-{uuid.uuid4().hex[:6]}"
    core.create_node({"metadata": {"name": node_name, "labels": {"railyard.dev/test": "reflector"}}})
    pods = [f"foreign-{i}" for i in range(10)]
    for name in pods:
        core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": {
            "schedulingGates": [{"name": "hold"}], "containers": [{"name": "c", "image": "registry.invalid/x:0"}]}})
    create_job(custom, namespace, make_job("listed", 1, annotations={}))

    async def scenario() -> None:
        state = ClusterState()
        first = start(state, kubeconfig)
        assert not state.ready, "ready before anything was listed"
        await until(lambda: state.ready, 30, "all kinds listed")
        assert all((namespace, p) in state.pods for p in pods), "a paged list (7 a page) missed pods"
        assert node_name in state.excluded and (namespace, "listed") in state.jobs
        # A watch event arrives for a change made while watching.
        core.delete_namespaced_pod(pods[0], namespace, grace_period_seconds=0)
        await until(lambda: (namespace, pods[0]) not in state.pods, 30, "the deletion to be watched")
        # The watch goes down; objects vanish meanwhile; a new reflector re-lists into the same state.
        for r in first:
            r.stop()
        await asyncio.sleep(0)
        core.delete_node(node_name)
        core.delete_namespaced_pod(pods[1], namespace, grace_period_seconds=0)
        delete_job(custom, namespace, "listed")
        lists = {r.kind: r.lists for r in first}
        second = start(state, kubeconfig)
        await until(lambda: all(r.lists >= 1 for r in second), 30, "the re-list")
        assert node_name not in state.excluded and node_name not in state.nodes
        assert (namespace, pods[1]) not in state.pods and (namespace, pods[2]) in state.pods
        assert (namespace, "listed") not in state.jobs
        assert all(r.lists == lists[r.kind] for r in first), "the stopped reflectors listed again"
        for r in second:
            r.stop()

    try:
        asyncio.run(scenario())
    finally:
        try:
            core.delete_node(node_name)
        except client.ApiException as e:
            assert e.status == 404
