"""Hot spares on the real control plane (an operator with RAILYARD_SPARES_PER_TOR=1): a gang fills a TOR
but its last free node; an ordinary job may not take that spare, a job with backfillSpares may; when a
node of the gang fails, the backfilling job is evicted (requeued with Preempted) and the lost rank is
replaced by the spare in its own TOR."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.e2e.test_faults import free_whole_nodes, lift_quarantine
from tests.support.jobs import condition, create_job, get_job, pinned, placeable_by_tor, wait_bound, wait_condition
from tests.support.operator import OperatorProcess, running_operator
from tests.support.poll import poll

pytestmark = pytest.mark.e2e
FAULT = {"key": "nvidia.com/gpu-xid-error", "value": "79", "effect": "NoExecute"}


@pytest.fixture
def spare_operator(identity, crds, coordination, core, tmp_path) -> Iterator[OperatorProcess]:
    with running_operator(identity, coordination, core, tmp_path, "spares", {"RAILYARD_SPARES_PER_TOR": "1"}) as op:
        yield op


def test_a_backfilled_spare_is_given_back_and_the_lost_rank_lands_on_it_in_its_own_tor(
        spare_operator, api_client, core, custom, namespace):
    by_tor = placeable_by_tor(core)
    tor = next((t for t, nodes in sorted(by_tor.items()) if len(nodes) >= 3 and
                len(free_whole_nodes(api_client, core, t, set())) == len(nodes)), None)
    assert tor is not None, f"no TOR with 3 whole free nodes: {by_tor}"
    width = len(by_tor[tor]) - 1
    create_job(custom, namespace, pinned("main", width, tor, topology={"requiredTier": "tor"}))
    before = {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"]
              for p in wait_bound(api_client, core, namespace, "main", width, timeout=90)}
    wait_condition(custom, namespace, "main", "Running", timeout=60)
    create_job(custom, namespace, pinned("ordinary", 1, tor))
    create_job(custom, namespace, pinned("filler", 1, tor, preemption={"backfillSpares": True}))
    spare = wait_bound(api_client, core, namespace, "filler", 1, timeout=60)[0]["spec"]["nodeName"]
    wait_condition(custom, namespace, "filler", "Running", timeout=60)
    ordinary = condition(get_job(custom, namespace, "ordinary"), "Placed")
    assert ordinary and ordinary["status"] == "False", "an ordinary job leaves the spare"
    victim = before["0"]
    try:
        core.patch_node(victim, {"spec": {"taints": [FAULT]}})
        job = poll(lambda: (j := get_job(custom, namespace, "main"))["status"].get("restartCount") == 1 and j, 90,
                   "the gang restarted")
        replacement = job["status"]["lastRestart"]["replacements"][0]
        assert (replacement["lost"], replacement["new"], replacement["sameTor"]) == (victim, spare, True), replacement
        filler = get_job(custom, namespace, "filler")
        preempted = condition(filler, "Preempted")
        assert preempted and preempted["reason"] == "Preempted" and f"{namespace}/main" in preempted["message"]
        assert not condition(filler, "Failed")
        after = {p["metadata"]["labels"]["railyard.dev/rank"]: p["spec"]["nodeName"]
                 for p in wait_bound(api_client, core, namespace, "main", width, timeout=90)
                 if p["metadata"]["name"].startswith("main.p1-")}
        assert after.get("0") == spare
    finally:
        core.patch_node(victim, {"spec": {"taints": None}})
        with contextlib.suppress(client.ApiException):
            lift_quarantine(core, victim)
