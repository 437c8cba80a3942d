"""The starvation rule end to end: a gang that waited too long reserves the domain it waits for;
jobs behind it may not take capacity there (but by their declared limits, or as small jobs when an admin allows
them), and it lands when that domain frees up."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.jobs import (
    condition,
    create_job,
    delete_job,
    make_job,
    pinned,
    placeable_nodes,
    pods_of,
    wait_bound,
    wait_condition,
)
from tests.support.operator import OperatorProcess, wait_for_leader
from tests.support.poll import poll

pytestmark = pytest.mark.e2e


def test_starving_gang_reserves_its_domain(identity, crds, api_client, core, custom, coordination, namespace,
                                           lease_namespace, tmp_path):
    sizes = Counter(n.metadata.labels["topology.railyard.dev/tor"] for n in placeable_nodes(core))
    size = min(sizes.values())
    tors = sorted(t for t, count in sizes.items() if count == size)
    op = OperatorProcess(identity, lease_namespace, tmp_path, name="queue",
                         extra_env={"RAILYARD_STARVATION_SECONDS": "0"})
    try:
        wait_for_leader(coordination, lease_namespace)
        # One busy node in every TOR: no TOR can hold a gang of `size` whole nodes.
        for i, tor in enumerate(tors):
            create_job(custom, namespace, pinned(f"fill-{i}", 1, tor))
        for i in range(len(tors)):
            wait_bound(api_client, core, namespace, f"fill-{i}", 1)
        create_job(custom, namespace, make_job("big", size, topology={"requiredTier": "tor"}))
        job = wait_condition(custom, namespace, "big", "Placed", status="False", reason="Reserving")
        assert "the nodes it waits for are reserved" in condition(job, "Placed")["message"]
        reserved = tors[0]  # every TOR has the same free capacity: the first by name is reserved
        create_job(custom, namespace, pinned("behind-reserved", 1, reserved))
        create_job(custom, namespace, pinned("behind-elsewhere", 1, tors[1]))
        wait_bound(api_client, core, namespace, "behind-elsewhere", 1)
        waiting = wait_condition(custom, namespace, "behind-reserved", "Placed", status="False")
        assert not (waiting.get("status") or {}).get("placement"), "a job behind the reservation took its domain"
        delete_job(custom, namespace, "fill-0")  # the reserved TOR frees up
        pods = wait_bound(api_client, core, namespace, "big", size, timeout=90)
        placed_tors = {core.read_node(p["spec"]["nodeName"]).metadata.labels["topology.railyard.dev/tor"]
                       for p in pods}
        assert placed_tors == {reserved}
        wait_condition(custom, namespace, "big", "Placed", reason="Released")  # recorded with its Running
    finally:
        op.stop()


def test_jobs_with_declared_limits_backfill_a_reservation_and_end_at_their_limit(
        identity, crds, api_client, core, custom, coordination, namespace, lease_namespace, tmp_path):
    """The big gang reserves a TOR one of whose nodes is half used by a job with a time limit; a job whose limit
    ends before that one's does is placed beside it (backfill, with a Backfilled Event), one without a limit is
    not; the limited jobs are ended at their limits (Failed, TimeLimitExceeded, an Event) and the big gang lands
    on the reserved TOR. Backfill trusts the declared limits whole here (RAILYARD_BACKFILL_TRUST=1) to keep the
    test short."""
    sizes = Counter(n.metadata.labels["topology.railyard.dev/tor"] for n in placeable_nodes(core))
    size = min(sizes.values())
    tors = sorted(t for t, count in sizes.items() if count == size)
    op = OperatorProcess(identity, lease_namespace, tmp_path, name="backfill",
                         extra_env={"RAILYARD_STARVATION_SECONDS": "0", "RAILYARD_BACKFILL_TRUST": "1"})
    try:
        wait_for_leader(coordination, lease_namespace)
        # One busy node in every TOR; in the reserved one (the first by name) half a node, for 60 s only.
        for i, tor in enumerate(tors):
            limit = {"timeLimitSeconds": 60, "gpus": 4} if i == 0 else {}
            create_job(custom, namespace, pinned(f"fill-{i}", 1, tor, **limit))
        for i in range(len(tors)):
            wait_bound(api_client, core, namespace, f"fill-{i}", 1)
        create_job(custom, namespace, make_job("big", size, topology={"requiredTier": "tor"}))
        wait_condition(custom, namespace, "big", "Placed", status="False", reason="Reserving")
        reserved = tors[0]
        create_job(custom, namespace, pinned("unlimited", 1, reserved, gpus=4))
        create_job(custom, namespace, pinned("short", 1, reserved, timeLimitSeconds=10, gpus=4))
        short_pod, = wait_bound(api_client, core, namespace, "short", 1, timeout=30)  # ends before fill-0's 60 s
        fill_pod, = pods_of(api_client, core, namespace, "fill-0")
        assert short_pod["spec"]["nodeName"] == fill_pod["spec"]["nodeName"], "beside fill-0, not on a free node"
        backfilled = poll(lambda: [e for e in core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=short").items if e.reason == "Backfilled"],
            30, "a Backfilled Event")
        assert f"reserved for {namespace}/big" in backfilled[0].message
        waiting = wait_condition(custom, namespace, "unlimited", "Placed", status="False")
        assert not (waiting.get("status") or {}).get("placement"), "a job without a limit took reserved nodes"
        short = wait_condition(custom, namespace, "short", "Failed", reason="TimeLimitExceeded", timeout=60)
        assert "spec.timeLimitSeconds=10" in condition(short, "Failed")["message"]
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=short").items
        assert any(e.reason == "TimeLimitExceeded" for e in events)
        wait_condition(custom, namespace, "fill-0", "Failed", reason="TimeLimitExceeded", timeout=90)
        pods = wait_bound(api_client, core, namespace, "big", size, timeout=120)
        placed_tors = {core.read_node(p["spec"]["nodeName"]).metadata.labels["topology.railyard.dev/tor"]
                       for p in pods}
        assert placed_tors == {reserved}, "the big gang landed where it reserved, when the limits ran out"
    finally:
        op.stop()


def test_with_small_jobs_allowed_a_small_job_without_a_limit_uses_a_reservation_and_a_larger_one_waits(
        identity, crds, api_client, core, custom, coordination, namespace, lease_namespace, tmp_path):
    """RAILYARD_SMALL_JOB_GPUS=4: the big gang reserves a TOR with an eighth of its nodes or more busy; a 4-GPU job
    without a limit is placed on it (with a LentReservedNodes Event), an 8-GPU one is not (it asks more than the
    setting allows)."""
    sizes = Counter(n.metadata.labels["topology.railyard.dev/tor"] for n in placeable_nodes(core))
    size = min(sizes.values())
    tors = sorted(t for t, count in sizes.items() if count == size)
    busy = -(-size // 8)  # an eighth of the reserved TOR's nodes, rounded up: the holder stays open to small jobs
    op = OperatorProcess(identity, lease_namespace, tmp_path, name="small-jobs",
                         extra_env={"RAILYARD_STARVATION_SECONDS": "0", "RAILYARD_SMALL_JOB_GPUS": "4"})
    try:
        wait_for_leader(coordination, lease_namespace)
        # The same busy nodes in every TOR: no TOR holds the gang, and the first by name is reserved.
        fills = [(f"fill-{i}-{j}", tor) for i, tor in enumerate(tors) for j in range(busy)]
        for name, tor in fills:
            create_job(custom, namespace, pinned(name, 1, tor))
        for name, _ in fills:
            wait_bound(api_client, core, namespace, name, 1)
        create_job(custom, namespace, make_job("big", size, topology={"requiredTier": "tor"}))
        wait_condition(custom, namespace, "big", "Placed", status="False", reason="Reserving")
        reserved = tors[0]
        create_job(custom, namespace, pinned("larger", 1, reserved))
        create_job(custom, namespace, pinned("small", 1, reserved, gpus=4))
        small_pod, = wait_bound(api_client, core, namespace, "small", 1, timeout=30)
        # The gang reserves every node of its TOR; the busy ones are full: the small job is on a free reserved node.
        busy_nodes = {p["spec"]["nodeName"] for name, _ in fills for p in pods_of(api_client, core, namespace, name)}
        assert small_pod["spec"]["nodeName"] not in busy_nodes
        lent = poll(lambda: [e for e in core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=small").items if e.reason == "LentReservedNodes"],
            30, "a LentReservedNodes Event")
        assert f"reserved for {namespace}/big" in lent[0].message and "at most 4 GPUs" in lent[0].message
        waiting = wait_condition(custom, namespace, "larger", "Placed", status="False")
        assert not (waiting.get("status") or {}).get("placement"), "an 8-GPU job took reserved nodes"
    finally:
        op.stop()
