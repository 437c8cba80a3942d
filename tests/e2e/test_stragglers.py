"""A straggler found from reports on the real control plane: the test reports on behalf of a gang's
ranks (pod-bound tokens, the operator's real endpoint and TokenReview) with one node computing 30 %
slower; the operator asks for a checkpoint, the ranks save it, and the gang restarts without that
node, which is quarantined."""

from __future__ import annotations

import time

import pytest
import requests

from tests.e2e.test_operator import assert_no_gpu_double_booked
from tests.support.faults import bound_generation, ranks_of, untaint
from tests.support.jobs import create_job, get_job, make_job, wait_bound, wait_condition
from tests.support.poll import poll
from tests.support.worker import pod_token

pytestmark = pytest.mark.e2e


def test_a_slow_node_is_checkpointed_evicted_and_quarantined(operator, api_client, core, custom, namespace):
    policy = {"action": "Evict", "threshold": 0.85, "minDurationSeconds": 8, "warmupSteps": 0,
              "window": {"steps": 20, "seconds": 0}, "checkpointTimeoutSeconds": 120, "quarantineSeconds": 15}
    create_job(custom, namespace, make_job("laggard", 4, stragglerPolicy=policy, checkpoint={"path": "/c"}))
    pods = wait_bound(api_client, core, namespace, "laggard", 4)
    wait_condition(custom, namespace, "laggard", "Running", timeout=60)
    before = ranks_of(pods)
    slow_node = before["2"]
    tokens = {int(p["metadata"]["labels"]["railyard.dev/rank"]): pod_token(core, namespace, p) for p in pods}
    step, target, saved = 0, None, False
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if saved and get_job(custom, namespace, "laggard")["status"].get("restartCount") == 1:
                break  # restarted: the old generation's tokens are refused from now on
            # One report per rank per second, 5 steps each (the rate limit is 2 per second per pod).
            samples = {r: [[s, 1.3 if r == 2 else 1.0, 1.5] for s in range(step, step + 5)] for r in tokens}
            checkpoints = [{"step": target, "path": f"/c/step-{target}"}] if target is not None and \
                step + 5 > target else []
            for rank, token in tokens.items():
                answer = requests.post(operator.report_url, timeout=10, headers={"Authorization": f"Bearer {token}"},
                                       json={"namespace": namespace, "job": "laggard", "rank": rank, "restartCount": 0,
                                             "step": step + 4, "samples": samples[rank], "checkpoints": checkpoints})
                # 429: over the per-pod rate; once the checkpoint is in, the restart may already have
                # deleted this pod (403) or moved the job on (409).
                assert answer.status_code in ((200, 429, 403, 409) if saved else (200, 429)), answer.text
                if answer.ok:
                    target = (answer.json()["directives"].get("checkpoint") or {}).get("step", target)
            saved = saved or bool(checkpoints)
            step += 5
            time.sleep(1)
        job = get_job(custom, namespace, "laggard")
        assert target is not None, f"no checkpoint was requested: {job['status'].get('stragglers')}"
        assert job["status"]["restartCount"] == 1 and job["status"]["lastRestart"]["reason"] == "Straggler"
        assert job["status"]["lastRestart"]["lostNodes"] == [slow_node]
        assert job["status"]["lastRestart"]["resumeStep"] == target, "resumes from the checkpoint taken for it"
        after = ranks_of(bound_generation(api_client, core, namespace, "laggard", 4))
        assert after["2"] != slow_node and all(after[r] == before[r] for r in ("0", "1", "3"))
        taints = core.read_node(slow_node).spec.taints or []
        assert any(t.key == "railyard.dev/unhealthy" and t.value == "Straggler" for t in taints)
        assert "railyard.dev/quarantined-until" in (core.read_node(slow_node).metadata.annotations or {})
        # quarantineSeconds later the operator lifts the taint itself.
        poll(lambda: not [t for t in core.read_node(slow_node).spec.taints or [] if t.key == "railyard.dev/unhealthy"]
             and "railyard.dev/quarantined-until" not in (core.read_node(slow_node).metadata.annotations or {}),
             60, "the timed quarantine lifted")
        events = {e.reason for e in core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=laggard").items}
        assert "StragglerDetected" in events, events
        poll(lambda: not get_job(custom, namespace, "laggard")["status"].get("stragglers"), 30, "stragglers cleared")
        assert_no_gpu_double_booked(api_client, core)
    finally:
        untaint(core, slow_node, "none")
