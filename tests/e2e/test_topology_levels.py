"""A topology with a level above the spine, end to end: the operator configured with
RAILYARD_TOPOLOGY_LEVELS reads the extra node label, keeps a `requiredTier: zone` gang in one zone,
says which zone is largest when none holds it, and reports a level it does not have as InvalidSpec."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client
from railyard.topology.cluster.labels import LABEL_LEAF, LABEL_SPINE, LABEL_TOR

from tests.support.jobs import condition, create_job, get_job, make_job, pods_of, wait_bound, wait_condition
from tests.support.operator import OperatorProcess, wait_for_leader

pytestmark = pytest.mark.e2e

ZONE = "e2e.railyard.dev/zone"
LEVELS = f"zone={ZONE},spine={LABEL_SPINE},leaf={LABEL_LEAF},tor={LABEL_TOR}"


@pytest.fixture
def zones(core) -> Iterator[dict[str, str]]:
    """Every GPU node gets a zone: the first spine by name is zone a, the other spines zone b."""
    nodes = [n for n in core.list_node().items if (n.metadata.labels or {}).get(LABEL_SPINE)]
    spines = sorted({n.metadata.labels[LABEL_SPINE] for n in nodes})
    if len(spines) < 2:
        pytest.skip("needs nodes on two spines (native topology labels)")
    zone_of = {n.metadata.name: "zone-a" if n.metadata.labels[LABEL_SPINE] == spines[0] else "zone-b" for n in nodes}
    for name, zone in zone_of.items():
        core.patch_node(name, {"metadata": {"labels": {ZONE: zone}}})
    try:
        yield zone_of
    finally:
        for name in zone_of:
            with contextlib.suppress(client.ApiException):
                core.patch_node(name, {"metadata": {"labels": {ZONE: None}}})


def test_required_zone_from_a_topology_definition(identity, crds, api_client, core, custom, coordination, namespace,
                                                  lease_namespace, tmp_path, zones):
    sizes = Counter(zones.values())
    op = OperatorProcess(identity, lease_namespace, tmp_path, name="levels",
                         extra_env={"RAILYARD_TOPOLOGY_LEVELS": LEVELS})
    try:
        wait_for_leader(coordination, lease_namespace)
        fits = min(sizes.values()) // 2
        create_job(custom, namespace, make_job("inzone", fits, topology={"requiredTier": "zone",
                                                                         "preferredTier": "spine"}))
        create_job(custom, namespace, make_job("toobig", max(sizes.values()) + 1, topology={"requiredTier": "zone"}))
        create_job(custom, namespace, make_job("rack", 2, topology={"requiredTier": "rack"}))

        pods = wait_bound(api_client, core, namespace, "inzone", fits, timeout=120)
        assert len({zones[p["spec"]["nodeName"]] for p in pods}) == 1
        placement = get_job(custom, namespace, "inzone")["status"]["placement"]
        assert {d["level"]: d["count"] for d in placement["domains"]}["zone"] == 1

        waiting = wait_condition(custom, namespace, "toobig", "Placed", status="False", reason="Unschedulable")
        # 33 nodes can never fit a 32-node zone: said so, and nothing is reserved for it
        assert condition(waiting, "Placed")["message"].startswith(
            "can never fit this cluster, even with nothing else on it: requiredTier zone: largest zone (zone-")

        invalid = wait_condition(custom, namespace, "rack", "Placed", status="False", reason="InvalidSpec")
        message = condition(invalid, "Placed")["message"]
        assert "spec.topology.requiredTier: 'rack' is not a level" in message
        assert "zone, spine, leaf, tor, node" in message
        assert not pods_of(api_client, core, namespace, "rack") and not pods_of(api_client, core, namespace, "toobig")
    finally:
        op.stop()
        print(op.log_tail(20))
