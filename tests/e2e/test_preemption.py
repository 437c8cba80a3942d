"""Gang preemption on the real control plane. One TOR full of low-priority one-node gangs; a gang of a
Never class waits; a high-priority 2-node gang requiring one TOR evicts the two gangs that lose the
least work (they committed a checkpoint a moment ago), after asking their ranks to save a step (the test
reports on behalf of the ranks with pod-bound tokens, as railyard.worker does); they are requeued with
Preempted and Events naming the preemptor, never failed, and the preemptor lands in that TOR."""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import pytest
import requests
from kubernetes import client

from tests.support.jobs import (
    condition,
    create_job,
    get_job,
    pinned,
    placeable_by_tor,
    wait_bound,
    wait_condition,
)
from tests.support.poll import poll
from tests.support.worker import pod_token

pytestmark = pytest.mark.e2e


@pytest.fixture
def classes(api_client):
    scheduling = client.SchedulingV1Api(api_client)
    suffix = uuid.uuid4().hex[:6]
    names = {"low": (f"e2e-low-{suffix}", 10, "PreemptLowerPriority"),
             "high": (f"e2e-high-{suffix}", 100000, "PreemptLowerPriority"),
             "polite": (f"e2e-polite-{suffix}", 100000, "Never")}
    for name, value, policy in names.values():
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value, "preemptionPolicy": policy})
    yield {k: v[0] for k, v in names.items()}
    for name, _, _ in names.values():
        with contextlib.suppress(client.ApiException):
            scheduling.delete_priority_class(name)


def _job(name: str, replicas: int, class_name: str, tor: str, **spec: Any) -> dict[str, Any]:
    return pinned(name, replicas, tor, priorityClassName=class_name, **spec)


def _report(operator, token: str, namespace: str, job: str, step: int, saved: int | None = None) -> dict:
    checkpoints = [{"step": saved, "path": f"/c/step-{saved}"}] if saved is not None else []
    answer = requests.post(operator.report_url, timeout=10, headers={"Authorization": f"Bearer {token}"},
                           json={"namespace": namespace, "job": job, "rank": 0, "restartCount": 0, "step": step,
                                 "checkpoints": checkpoints})
    assert answer.status_code in (200, 429), answer.text
    return answer.json().get("directives") or {} if answer.ok else {}


def test_a_high_priority_gang_evicts_the_cheapest_gangs_of_one_tor_checkpoint_first_and_lands_there(
        operator, api_client, core, custom, namespace, classes):
    by_tor = placeable_by_tor(core)
    tor, nodes = max(by_tor.items(), key=lambda kv: (len(kv[1]), kv[0]))
    assert len(nodes) >= 3, by_tor
    low = [f"low-{i}" for i in range(len(nodes))]
    for name in low:
        create_job(custom, namespace, _job(name, 1, classes["low"], tor, checkpoint={"path": "/c"}))
    pods = {name: wait_bound(api_client, core, namespace, name, 1, timeout=90)[0] for name in low}
    for name in low:
        wait_condition(custom, namespace, name, "Running", timeout=60)
    tokens = {name: pod_token(core, namespace, pod) for name, pod in pods.items()}
    # A job of a Never class waits rather than evicting anyone.
    create_job(custom, namespace, _job("polite", 2, classes["polite"], tor, topology={"requiredTier": "tor"}))
    poll(lambda: (c := condition(get_job(custom, namespace, "polite"), "Placed")) and c["status"] == "False", 30,
         "the Never job's Placed=False")
    # Two gangs committed a checkpoint a moment ago: evicting them loses the least work.
    cheap = low[:2]
    for name in cheap:
        _report(operator, tokens[name], namespace, name, 50, saved=50)
    placed = condition(get_job(custom, namespace, "polite"), "Placed")
    assert placed["reason"] in ("Unschedulable", "Reserving"), placed
    custom.delete_namespaced_custom_object("railyard.dev", "v1alpha1", namespace, "trainingjobs", "polite")
    started = time.monotonic()
    create_job(custom, namespace, _job("urgent", 2, classes["high"], tor, topology={"requiredTier": "tor"}))
    marked = poll(lambda: (m := [n for n in low if (get_job(custom, namespace, n).get("status") or {})
                                 .get("preemptedBy") == f"{namespace}/urgent"]) and m, 30, "victims chosen")
    assert sorted(marked) == sorted(cheap), "the gangs that lose the least work are chosen"
    # Their ranks are asked to save a step and hold; they report it saved.
    asked: dict[str, int] = {}
    deadline = time.monotonic() + 60
    step = 55
    while len(asked) < len(cheap) and time.monotonic() < deadline:
        for name in cheap:
            if name not in asked:
                target = (_report(operator, tokens[name], namespace, name, step).get("checkpoint") or {}).get("step")
                if target is not None:
                    asked[name] = target
        step += 5
        time.sleep(0.5)  # the simulated ranks' pace
    assert len(asked) == len(cheap), "every victim was asked to save a step"
    for name, target in asked.items():
        _report(operator, tokens[name], namespace, name, target, saved=target)
    urgent = wait_bound(api_client, core, namespace, "urgent", 2, timeout=120)
    released = time.monotonic() - started
    assert {p["spec"]["nodeName"] for p in urgent} <= set(nodes)
    for name in cheap:
        job = get_job(custom, namespace, name)
        preempted = condition(job, "Preempted")
        assert preempted and (preempted["status"], preempted["reason"]) == ("True", "Preempted"), preempted
        assert condition(job, "Placed")["status"] == "False", "requeued: waiting for room again"
        assert not condition(job, "Failed")
        assert job["status"]["lastRestart"]["resumeStep"] == asked[name], "resumes from the step it saved"
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        assert any(e.reason == "Preempted" and f"{namespace}/urgent" in e.message for e in events), \
            [(e.reason, e.message) for e in events]
    for name in low[2:]:
        job = get_job(custom, namespace, name)
        assert condition(job, "Running")["status"] == "True" and not condition(job, "Preempted"), name
    print(f'{{"preemption_release_seconds": {released:.1f}, "victims": {len(cheap)}}}')
