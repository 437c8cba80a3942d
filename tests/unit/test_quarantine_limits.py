"""Quarantine is the operator's (issue 21): cluster-wide caps, the longest quarantine, and a straggler
quarantine of a shared node only with corroboration. A tenant reports its own step times, so its
report alone never takes a node away from other tenants."""

from __future__ import annotations

import asyncio

from railyard.operator.decide.quarantine_limits import Limits, lasting, room, straggler_quarantine_allowed
from railyard.operator.decide.straggler_status import eviction_restart
from railyard.operator.decide.stragglers import Straggler
from railyard.topology.api.job import StragglerRecord

from tests.support.harness import Rig, rig
from tests.support.jobs import make_job
from tests.support.nodes import taint, update_node
from tests.support.settings import settings as operator_settings

UNHEALTHY = "railyard.dev/unhealthy"


def limits(**settings) -> Limits:
    return Limits.of(operator_settings(**settings).quarantine)


def test_room_is_a_share_of_the_gpu_nodes_at_least_one_and_at_most_the_cap():
    assert room(0, 100, limits(quarantine_max_share=0.05)) == 5
    assert room(4, 100, limits(quarantine_max_share=0.05)) == 1
    assert room(0, 4, limits(quarantine_max_share=0.05)) == 1, "one lost node is always quarantined"
    assert room(0, 1000, limits(quarantine_max_share=0.05, quarantine_max_nodes=3)) == 3


def test_a_policy_can_only_ask_for_a_shorter_quarantine():
    cap = limits(quarantine_max_seconds=7200)
    assert lasting(None, 3600, cap) == 3600
    assert lasting(600, 3600, cap) == 600
    assert lasting(10**9, 3600, cap) == 7200
    assert lasting(0, 3600, cap) == 7200, "'permanent' is the operator's longest, not for ever"


def test_a_shared_node_needs_corroboration_and_the_hourly_cap_holds():
    cap = limits(straggler_quarantines_per_hour=2)
    assert straggler_quarantine_allowed(False, 0, 0, cap) is not None
    assert straggler_quarantine_allowed(False, 1, 0, cap) is None
    assert straggler_quarantine_allowed(True, 0, 0, cap) is None
    assert straggler_quarantine_allowed(True, 0, 2, cap) is not None


def _evict(r: Rig, name: str, node: str) -> None:
    job = r.state.jobs[("default", name)]
    slow = Straggler(node, tuple(x.rank for x in job.placement.ranks if x.node == node), 0.5, 0.0, True)
    asyncio.run(r.loop.recovery.carry_out(job, eviction_restart(job, slow)))
    r.deliver()


def _skipped(r: Rig) -> list[str]:
    return [e["message"] for e in r.api.posted_events if e["reason"] == "QuarantineSkipped"]


def test_a_tenant_reporting_a_shared_node_slow_moves_off_it_but_does_not_quarantine_it():
    r = rig(nodes=2)
    r.submit(make_job("other", 1, gpus=4))
    r.running()
    shared = r.nodes_of("other")[0]
    r.submit(make_job("liar", 1, gpus=4, stragglerPolicy={"action": "Evict", "quarantineSeconds": 0}))
    r.running()
    assert r.nodes_of("liar") == [shared], "packed next to the other job"
    _evict(r, "liar", shared)
    assert r.status("liar")["restartCount"] == 1
    assert not [t for t in r.taints(shared) if t["key"] == UNHEALTHY], "one tenant's word took a shared node"
    assert any("shared and no other job finds it slow" in m for m in _skipped(r))
    assert len(r.status("liar")["stragglerEvictions"]) == 1, "kept in status: the hourly cap survives restarts"


def test_a_shared_node_another_job_finds_slow_too_is_quarantined_for_at_most_the_longest():
    r = rig(nodes=2, quarantine_max_seconds=7200)
    r.submit(make_job("other", 1, gpus=4))
    r.running()
    shared = r.nodes_of("other")[0]
    body = r.api.objects["trainingjobs"][("default", "other")]
    body["status"]["stragglers"] = [StragglerRecord(node=shared, ranks=[0], score=0.5).model_dump(mode="json")]
    r.api._store("trainingjobs", body, "MODIFIED")
    r.deliver()
    r.submit(make_job("second", 1, gpus=4, stragglerPolicy={"action": "Evict", "quarantineSeconds": 0}))
    r.running()
    assert r.nodes_of("second") == [shared], "packed next to the other job"
    _evict(r, "second", shared)
    assert [t["value"] for t in r.taints(shared) if t["key"] == UNHEALTHY] == ["Straggler"]
    until = r.api.objects["nodes"][("", shared)]["metadata"]["annotations"]["railyard.dev/quarantined-until"]
    record = r.status("second")["lastRestart"]["quarantine"][0]
    assert record["until"] == until
    from railyard.topology.api.timestamps import epoch

    assert epoch(until, 0) - r.clock.time() <= 7200 + 1, "quarantineSeconds 0 gets the operator's longest"


def test_the_cluster_cap_bounds_how_many_nodes_one_restart_quarantines():
    r = rig(nodes=6, quarantine_max_nodes=1)
    r.submit(make_job("wide", 3))
    r.running()
    nodes = r.nodes_of("wide")
    fault = {"type": "GpuNvlinkWatch", "status": "True", "message": "NVLink down",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
    for node in nodes[:2]:
        update_node(r.api, r.state, node, lambda n: n["status"]["conditions"].append(dict(fault)))
    r.step()
    quarantined = [n for n in nodes if any(t["key"] == UNHEALTHY for t in r.taints(n))]
    assert len(quarantined) == 1 and r.status("wide")["restartCount"] == 1
    assert any("RAILYARD_QUARANTINE_MAX_NODES" in m for m in _skipped(r))


def test_an_admin_quarantine_counts_against_the_cap_too():
    r = rig(nodes=4, quarantine_max_nodes=1)
    spare = sorted(r.state.nodes)[-1]
    taint(r.api, r.state, spare, UNHEALTHY, "NoSchedule", "GpuFault")
    r.submit(make_job("solo", 1))
    r.running()
    node = r.nodes_of("solo")[0]
    fault = {"type": "GpuNvlinkWatch", "status": "True", "message": "NVLink down",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
    update_node(r.api, r.state, node, lambda n: n["status"]["conditions"].append(fault))
    r.step()
    assert r.status("solo")["restartCount"] == 1, "the job still moves off the faulty node"
    assert not [t for t in r.taints(node) if t["key"] == UNHEALTHY]
