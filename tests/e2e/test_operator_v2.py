"""Operator v2 guarantees against the real control plane: a lagging pod watch, a frozen leader,
name conflicts, templates the API server refuses, and no write storms. Every check reads the API."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
import requests
from kubernetes import client

from tests.e2e.test_operator import assert_no_gpu_double_booked
from tests.support.jobs import condition, create_job, delete_job, get_job, make_job, pods_of, wait_bound, wait_condition
from tests.support.operator import OperatorProcess, wait_for_leader
from tests.support.poll import poll

pytestmark = pytest.mark.e2e


def metric(operator: OperatorProcess, name: str) -> float:
    text = requests.get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def events_of(core, namespace: str, name: str, reason: str | None = None) -> list:
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in items if reason is None or e.reason == reason]


def test_a_lagging_pod_watch_never_fails_a_released_gang(
        identity, crds, api_client, core, custom, coordination, namespace, lease_namespace, tmp_path):
    laggard = OperatorProcess(identity, lease_namespace, tmp_path, name="laggard",
                              extra_env={"RAILYARD_TEST_POD_WATCH_DELAY_SECONDS": "6"})
    try:
        wait_for_leader(coordination, lease_namespace)
        create_job(custom, namespace, make_job("small16", 16, gpus=2))
        wait_condition(custom, namespace, "small16", "Placed", reason="Released", timeout=60)
        wait_bound(api_client, core, namespace, "small16", 16)
        # The operator sets Running only from pod events, which reach it 6 s late: once it is Running
        # the delayed events have all arrived, and the gang was never taken for deleted meanwhile.
        job = wait_condition(custom, namespace, "small16", "Running", timeout=90)
        assert not condition(job, "Failed"), condition(job, "Failed")
        assert condition(job, "Placed")["reason"] == "Released"
        released = events_of(core, namespace, "small16", "Released")
        assert len(released) == 1 and (released[0].count or 1) == 1
        assert not events_of(core, namespace, "small16", "PodDeleted")
        assert metric(laggard, "railyard_placements_total") == 1.0
    finally:
        laggard.stop()


def _audited_writes(log: Path, agent: str, since: float) -> list[dict]:
    writes = []
    for line in log.read_text(errors="replace").splitlines():
        entry = json.loads(line)
        user_agent = entry.get("userAgent") or ""
        if agent not in user_agent:
            continue
        received = datetime.fromisoformat(entry["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        if received >= since:
            checked = re.search(r"fence-checked/([0-9.]+)", user_agent)
            writes.append({"verb": entry.get("verb"), "uri": entry.get("requestURI"), "received": received,
                           "checked": float(checked.group(1)) if checked else None})
    return writes


def _all_threads_stopped(pid: int) -> bool:
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return bool(states) and all(state in ("T", "t") for state in states)


def test_a_leader_frozen_past_its_lease_writes_nothing_when_it_wakes(
        identity, crds, api_client, core, custom, coordination, namespace, lease_namespace, tmp_path):
    audit = Path(os.environ.get("RAILYARD_CACHE", Path.home() / ".cache" / "railyard")) / "cluster" / "audit.log"
    if not (os.environ.get("RAILYARD_LOCAL_RIG") and audit.exists()):
        pytest.skip("needs the local rig's API server audit log to count the old leader's requests")
    first = OperatorProcess(identity, lease_namespace, tmp_path, name="frozen")
    holder = wait_for_leader(coordination, lease_namespace)
    second = OperatorProcess(identity, lease_namespace, tmp_path, name="standby")
    try:
        assert f"started as {holder}" in first.log_path.read_text(errors="replace")
        names = [f"burst-{i}" for i in range(24)]
        for i, name in enumerate(names):
            create_job(custom, namespace, make_job(name, 1 + i % 3, gpus=(8, 4, 2)[i % 3]))
        poll(lambda: sum(1 for n in names if (get_job(custom, namespace, n).get("status") or {}).get("placement"))
             >= 4, 60, "a few jobs placed by the first leader")
        first.proc.send_signal(signal.SIGSTOP)
        # The freeze starts once every thread is stopped (state T), not when the signal is sent: a write
        # checked in between was decided before the freeze. Threads stop one by one on a busy machine.
        poll(lambda: _all_threads_stopped(first.proc.pid), 10, "the first leader stopped")
        frozen = time.time()
        poll(lambda: coordination.read_namespaced_lease("railyard-operator", lease_namespace).spec.holder_identity
             not in (None, holder), 60, "the standby to take the lease")
        late = make_job("after-takeover", 2)
        create_job(custom, namespace, late)
        for i, name in enumerate(names):
            wait_bound(api_client, core, namespace, name, 1 + i % 3, timeout=120)
        wait_bound(api_client, core, namespace, "after-takeover", 2, timeout=60)
        woke = time.time()
        first.proc.send_signal(signal.SIGCONT)
        # The woken replica notices it lost the lease on its next renewal attempt.
        poll(lambda: "lost leadership" in first.log_path.read_text(errors="replace"), 30,
             "the woken replica to see it is no longer leader")
        create_job(custom, namespace, make_job("after-wake", 1))
        wait_bound(api_client, core, namespace, "after-wake", 1, timeout=60)
        agent = f"railyard-operator/{holder}"
        assert _audited_writes(audit, agent, 0), "the audit log must show the first leader's earlier writes"
        # After waking, the old leader decides no write: anything it sent then had passed the fence
        # before the freeze (frozen mid-send; the documented window of a lease-based fence).
        late = _audited_writes(audit, agent, woke)
        decided_after_freeze = [w for w in late if w["checked"] is None or w["checked"] >= frozen]
        assert decided_after_freeze == [], f"the old leader wrote after losing its term: {decided_after_freeze[:5]}"
        print(f"writes in flight at the freeze, sent on waking: {len(late)}")
        assert_no_gpu_double_booked(api_client, core)
        for name in [*names, "after-takeover", "after-wake"]:
            placement = get_job(custom, namespace, name)["status"]["placement"]
            pods = {p["metadata"]["name"] for p in pods_of(api_client, core, namespace, name)}
            assert {r["pod"] for r in placement["ranks"]} == pods, f"{name}: pods and placement disagree"
    finally:
        if first.proc.poll() is None:
            first.proc.send_signal(signal.SIGCONT)
        first.stop()
        second.stop()


def test_a_name_taken_by_someone_else_is_reported_and_holds_nothing(operator, api_client, core, custom, namespace):
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "clash-1"},
        "spec": {"schedulingGates": [{"name": "someone-else"}],
                 "containers": [{"name": "c", "image": "registry.invalid/x:0"}]}})
    free_before = metric(operator, "railyard_free_gpus")
    create_job(custom, namespace, make_job("clash", 2))
    job = wait_condition(custom, namespace, "clash", "Placed", status="False", reason="NameConflict")
    assert f"pod {namespace}/clash-1 already exists" in condition(job, "Placed")["message"]
    assert not (job["status"].get("placement") or {}).get("ranks")
    poll(lambda: not [p for p in pods_of(api_client, core, namespace, "clash")], 30, "the job's own pods removed")
    foreign = core.read_namespaced_pod("clash-1", namespace)
    assert foreign.metadata.labels is None or "railyard.dev/job-name" not in foreign.metadata.labels
    poll(lambda: metric(operator, "railyard_free_gpus") >= free_before, 30, "its GPUs given back")


@pytest.mark.parametrize(("template_change", "field"), [
    ({"containers": [{"name": "Trainer_One", "image": "registry.invalid/t:0",
                      "resources": {"limits": {"nvidia.com/gpu": 8}}}]}, "Trainer_One"),
    ({"containers": [{"name": "t", "image": "registry.invalid/t:0",
                      "resources": {"limits": {"nvidia.com/gpu": 8}, "requests": {"cpu": "lots"}}}]}, "lots"),
])
def test_a_template_that_cannot_become_pods_ends_in_invalid_spec_holding_nothing(
        operator, api_client, core, custom, namespace, template_change, field):
    body = make_job("malformed", 2)
    body["spec"]["template"]["spec"] = template_change
    try:
        create_job(custom, namespace, body)
    except client.ApiException as e:  # rejected by the API server: just as good
        assert e.status == 422 and field in e.body
        return
    job = wait_condition(custom, namespace, "malformed", "Placed", status="False", reason="InvalidSpec")
    assert field in condition(job, "Placed")["message"]
    assert not (job["status"].get("placement") or {}).get("ranks")
    poll(lambda: not pods_of(api_client, core, namespace, "malformed"), 30, "no pods left")


def test_an_unschedulable_job_does_not_storm_events(operator, api_client, core, custom, namespace):
    create_job(custom, namespace, make_job("enormous", 60000))
    wait_condition(custom, namespace, "enormous", "Placed", status="False", reason="Unschedulable")
    first = get_job(custom, namespace, "enormous")["metadata"]["resourceVersion"]
    for i in range(3):  # capacity moves: placements come and go; the binding constraint stays
        create_job(custom, namespace, make_job(f"mover-{i}", 2))
        wait_bound(api_client, core, namespace, f"mover-{i}", 2)
        delete_job(custom, namespace, f"mover-{i}")
        poll(lambda i=i: not pods_of(api_client, core, namespace, f"mover-{i}"), 60, "mover gone")
    assert get_job(custom, namespace, "enormous")["metadata"]["resourceVersion"] == first, \
        "the job's status was rewritten although its binding constraint did not change"
    assert len(events_of(core, namespace, "enormous", "Unschedulable")) == 1


def _health(port: int) -> requests.Response | None:
    try:
        return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    except requests.ConnectionError:
        return None


def test_liveness_probe_reports_the_loop_and_fails_when_it_stalls(
        operator, identity, crds, coordination, lease_namespace, tmp_path):
    healthy = poll(lambda: (r := _health(operator.health_port)) is not None and r.status_code == 200 and r, 30,
                   "a healthy liveness probe")
    body = healthy.json()
    assert "iterations" in body["placementLoop"] and body["state"]["ready"] is True
    # An operator whose stall limit is zero sees its own loop as stalled: liveness must fail.
    stalled = OperatorProcess(identity, lease_namespace, tmp_path, name="stalled",
                              extra_env={"RAILYARD_STALL_SECONDS": "0"})
    try:
        # (a Response with an error status is falsy: poll on the status code itself)
        code = poll(lambda: (r := _health(stalled.health_port)) is not None and r.status_code >= 500 and r.status_code,
                    30, "a failing liveness probe")
        assert code >= 500
    finally:
        stalled.stop()
