"""Where features meet, on the real control plane: a leader change while preemption victims save a step, and a
preemptor's landing node cordoned mid-preemption. The tests report on behalf of the ranks with pod-bound tokens,
as railyard.worker does."""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import pytest
import requests
from kubernetes import client

from tests.support.jobs import condition, create_job, get_job, pinned, placeable_by_tor, wait_bound, wait_condition
from tests.support.operator import OperatorProcess, wait_for_leader
from tests.support.poll import poll
from tests.support.worker import pod_token

pytestmark = pytest.mark.e2e


@pytest.fixture
def classes(api_client):
    scheduling = client.SchedulingV1Api(api_client)
    suffix = uuid.uuid4().hex[:6]
    names = {"low": (f"e2e-low-{suffix}", 10), "high": (f"e2e-high-{suffix}", 100000)}
    for name, value in names.values():
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
    yield {k: v[0] for k, v in names.items()}
    for name, _ in names.values():
        with contextlib.suppress(client.ApiException):
            scheduling.delete_priority_class(name)


def _report(url: str, token: str, namespace: str, job: str, step: int, saved: int | None = None) -> dict[str, Any]:
    """One rank-0 report (the gangs here have one rank); the directives the answer carries."""
    checkpoints = [{"step": saved, "path": f"/c/step-{saved}"}] if saved is not None else []
    answer = requests.post(url, timeout=10, headers={"Authorization": f"Bearer {token}"},
                           json={"namespace": namespace, "job": job, "rank": 0, "restartCount": 0, "step": step,
                                 "checkpoints": checkpoints})
    assert answer.status_code in (200, 429, 503), answer.text  # 503: not (yet) the leader
    return answer.json().get("directives") or {} if answer.ok else {}


def _low_gangs_on_a_tor(custom, api_client, core, namespace: str, low_class: str) -> tuple[str, list[str], dict]:
    """A TOR of at least three nodes, each running a one-node low gang that reports; their tokens by name."""
    tor, nodes = max(placeable_by_tor(core).items(), key=lambda kv: (len(kv[1]), kv[0]))
    assert len(nodes) >= 3
    low = [f"low-{i}" for i in range(len(nodes))]
    for name in low:
        create_job(custom, namespace, pinned(name, 1, tor, priorityClassName=low_class, checkpoint={"path": "/c"}))
    pods = {name: wait_bound(api_client, core, namespace, name, 1, timeout=90)[0] for name in low}
    for name in low:
        wait_condition(custom, namespace, name, "Running", timeout=60)
    return tor, low, {name: pod_token(core, namespace, pod) for name, pod in pods.items()}


def _marked(custom, namespace: str, names: list[str]) -> list[str]:
    return sorted(n for n in names if (get_job(custom, namespace, n).get("status") or {}).get("preemptedBy"))


def test_a_leader_change_while_victims_save_still_waits_for_their_step(identity, coordination, lease_namespace,
                                                                       api_client, core, custom, namespace,
                                                                       classes, tmp_path):
    first = OperatorProcess(identity, lease_namespace, tmp_path, name="first")
    second: OperatorProcess | None = None
    try:
        leader = wait_for_leader(coordination, lease_namespace)
        tor, low, tokens = _low_gangs_on_a_tor(custom, api_client, core, namespace, classes["low"])
        for name in low:  # every rank reports to the leader as it trains
            _report(first.report_url, tokens[name], namespace, name, 10)
        create_job(custom, namespace, pinned("urgent", 2, tor, priorityClassName=classes["high"],
                                             topology={"requiredTier": "tor"}))
        victims = poll(lambda: _marked(custom, namespace, low), 30, "victims chosen")
        first.stop(kill=True)  # the leader dies while its victims save
        second = OperatorProcess(identity, lease_namespace, tmp_path, name="second")
        poll(lambda: (h := wait_for_leader(coordination, lease_namespace)) != leader and h, 40, "a new leader")
        # The ranks report to the new leader (no save yet): it must not take them for ranks that never report.
        asked: dict[str, int] = {}
        step = 20
        deadline = time.monotonic() + 60
        while len(asked) < len(victims) and time.monotonic() < deadline:
            for name in victims:
                target = (_report(second.report_url, tokens[name], namespace, name, step).get("checkpoint") or {})
                if target.get("step") is not None:
                    asked[name] = target["step"]
                preempted = condition(get_job(custom, namespace, name), "Preempted") or {}
                assert preempted.get("reason") == "SavingCheckpoint", f"{name} evicted before it saved: {preempted}"
            step += 5
            time.sleep(1)  # the simulated ranks' pace: a report a second
        assert sorted(asked) == victims, "the new leader asked every victim for a step"
        for name, target in asked.items():
            _report(second.report_url, tokens[name], namespace, name, target, saved=target)
        for name in victims:
            wait_condition(custom, namespace, name, "Preempted", reason="Preempted", timeout=60)
            assert get_job(custom, namespace, name)["status"]["lastRestart"]["resumeStep"] == asked[name]
        assert _marked(custom, namespace, low) == victims or not set(_marked(custom, namespace, low)) - set(victims), \
            "no second set of victims"
        wait_bound(api_client, core, namespace, "urgent", 2, timeout=120)
    finally:
        for op in (first, second):
            if op is not None:
                op.stop()
                print(op.log_tail(20))


def test_a_landing_node_cordoned_mid_preemption_is_replanned_at_once(operator, api_client, core, custom, namespace,
                                                                     classes):
    tor, low, tokens = _low_gangs_on_a_tor(custom, api_client, core, namespace, classes["low"])
    for name in low:
        _report(operator.report_url, tokens[name], namespace, name, 10)
    create_job(custom, namespace, pinned("urgent", 2, tor, priorityClassName=classes["high"],
                                         topology={"requiredTier": "tor"}))
    victims = poll(lambda: _marked(custom, namespace, low), 30, "victims chosen")
    # The victims keep saving (their ranks report, but have not saved yet): the landing nodes stay held.
    landing = {get_job(custom, namespace, n)["status"]["placement"]["ranks"][0]["node"] for n in victims}
    cordoned = sorted(landing)[0]
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    try:
        started = time.monotonic()
        step = 20

        def replanned() -> list[str]:
            nonlocal step
            for name in low:
                _report(operator.report_url, tokens[name], namespace, name, step)
            step += 5
            return [n for n in _marked(custom, namespace, low) if n not in victims]

        third = poll(replanned, 30, "a victim outside the cordoned node chosen at once")
        assert time.monotonic() - started < 30, "re-planned on the next passes, not after the hold time (600 s)"
        assert all(get_job(custom, namespace, n)["status"]["placement"]["ranks"][0]["node"] != cordoned
                   for n in third)
    finally:
        core.patch_node(cordoned, {"spec": {"unschedulable": None}})
