"""Defragmentation on the real control plane (an operator with RAILYARD_DEFRAGMENTATION=true). A pool of
two nodes in each of two TORs (a node label this test sets), filled with migratable one-node gangs,
then one gang per TOR finishes: a 2-node gang requiring one TOR fits the pool by free GPUs but not by
topology. One gang is moved to the other TOR (a planned restart: no quarantine), and the waiting gang
lands in the TOR it left."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.e2e.test_faults import free_whole_nodes
from tests.support.jobs import (
    create_job,
    delete_job,
    get_job,
    make_job,
    on_nodes,
    placeable_by_tor,
    wait_bound,
    wait_condition,
)
from tests.support.operator import OperatorProcess, running_operator
from tests.support.poll import poll

pytestmark = pytest.mark.e2e
POOL = "e2e.railyard.dev/pool"


@pytest.fixture
def defrag_operator(identity, crds, coordination, core, tmp_path) -> Iterator[OperatorProcess]:
    with running_operator(identity, coordination, core, tmp_path, "defrag",
                          {"RAILYARD_DEFRAGMENTATION": "true"}) as op:
        yield op


@pytest.fixture
def pool(api_client, core) -> Iterator[tuple[str, dict[str, str]]]:
    """Two whole free nodes in each of two TORs, labelled as this test's pool: node -> TOR."""
    by_tor = placeable_by_tor(core)
    chosen: dict[str, str] = {}
    for tor in sorted(by_tor):
        free = free_whole_nodes(api_client, core, tor, set())
        if len(free) >= 2 and len({t for t in chosen.values()}) < 2:
            chosen.update({n: tor for n in sorted(free)[:2]})
    assert len(chosen) == 4, f"need two TORs with two whole free nodes: {by_tor}"
    name = uuid.uuid4().hex[:8]
    for node in chosen:
        core.patch_node(node, {"metadata": {"labels": {POOL: name}}})
    try:
        yield name, chosen
    finally:
        for node in chosen:
            with contextlib.suppress(client.ApiException):
                core.patch_node(node, {"metadata": {"labels": {POOL: None}}})


def _pooled(name: str, replicas: int, pool_name: str, **spec) -> dict:
    return on_nodes(make_job(name, replicas, **spec), {POOL: pool_name})


def test_a_gang_is_moved_to_the_other_tor_so_a_tor_gang_lands_in_the_one_it_left(
        defrag_operator, pool, api_client, core, custom, namespace):
    pool_name, tor_of = pool
    small = [f"small-{i}" for i in range(4)]
    for name in small:
        create_job(custom, namespace, _pooled(name, 1, pool_name, preemption={"migratable": True}))
    homes = {name: wait_bound(api_client, core, namespace, name, 1, timeout=90)[0]["spec"]["nodeName"]
             for name in small}
    for name in small:
        wait_condition(custom, namespace, name, "Running", timeout=60)
    finished: dict[str, str] = {}
    for name, node in sorted(homes.items()):
        finished.setdefault(tor_of[node], name)
    for name in finished.values():
        delete_job(custom, namespace, name)
    left = {name: tor_of[homes[name]] for name in small if name not in finished.values()}
    poll(lambda: all(not [p for p in core.list_namespaced_pod(namespace, label_selector=f"railyard.dev/job-name={n}")
                          .items] for n in finished.values()), 60, "the finished gangs' pods gone")
    create_job(custom, namespace, _pooled("wide", 2, pool_name, topology={"requiredTier": "tor"}))
    wide = wait_bound(api_client, core, namespace, "wide", 2, timeout=120)
    landed = {tor_of[p["spec"]["nodeName"]] for p in wide}
    moved = [n for n in left if (get_job(custom, namespace, n)["status"].get("lastRestart") or {})
             .get("reason") == "Migration"]
    assert len(moved) == 1, {n: get_job(custom, namespace, n)["status"].get("lastRestart") for n in left}
    assert landed == {left[moved[0]]}, "it landed in the TOR the moved gang left"
    status = get_job(custom, namespace, moved[0])["status"]
    assert status["lastRestart"]["replacements"][0]["sameTor"] is False
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={moved[0]}").items
    assert any(e.reason == "Migrating" and f"{namespace}/wide" in e.message for e in events)
    node = status["lastRestart"]["lostNodes"][0]
    assert not [t for t in core.read_node(node).spec.taints or [] if t.key == "railyard.dev/unhealthy"]
