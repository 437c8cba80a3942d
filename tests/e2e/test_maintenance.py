"""Planned maintenance on the real control plane: `kubectl drain` of a node under a running gang. The eviction
webhook (registered here as the chart registers it, over TLS) tells the operator and holds the drain's evictions
(429) meanwhile; it asks every rank to save a step (the test reports on
behalf of the ranks with pod-bound tokens, as railyard.worker does); once they have, the gang restarts
with that node's rank replaced and the drain completes; the new attempt resumes after the saved step."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import requests
from kubernetes import client

from tests.support.faults import bound_generation, ranks_of
from tests.support.jobs import create_job, get_job, make_job, wait_bound, wait_condition
from tests.support.operator import OperatorProcess, free_port, wait_for_leader
from tests.support.poll import poll
from tests.support.rig import rig_binary
from tests.support.tls import ca_bundle, certs, client_ca
from tests.support.worker import pod_token

pytestmark = pytest.mark.e2e

@pytest.fixture
def tls_operator(identity, crds, api_client, coordination, core, namespace, tmp_path) -> Iterator[OperatorProcess]:
    """An operator serving reports and the eviction webhook over TLS, and the webhook registered for
    this test's namespace (the chart's ValidatingWebhookConfiguration, pointed at this process)."""
    made = certs(tmp_path)
    lease = f"railyard-e2e-{uuid.uuid4().hex[:6]}"
    port = free_port()
    url = f"https://127.0.0.1:{port}/v1/reports"
    op = OperatorProcess(identity, lease, tmp_path, name="maintenance", extra_env={
        "RAILYARD_REPORT_PORT": str(port), "RAILYARD_REPORT_URL": url,
        "RAILYARD_REPORT_TLS_CERT": str(made["crt"]), "RAILYARD_REPORT_TLS_KEY": str(made["key"]),
        "RAILYARD_REPORT_CA_FILE": str(made["ca"]), **client_ca()})
    op.report_url, op.report_port = url, port
    admission = client.AdmissionregistrationV1Api(api_client)
    hook = f"railyard-e2e-evictions-{namespace}"
    admission.create_validating_webhook_configuration({
        "metadata": {"name": hook},
        "webhooks": [{"name": "evictions.railyard.dev", "admissionReviewVersions": ["v1"],
                      "sideEffects": "NoneOnDryRun", "failurePolicy": "Ignore", "timeoutSeconds": 2,
                      "clientConfig": {"url": f"https://127.0.0.1:{port}/v1/evictions",
                                       "caBundle": ca_bundle(made["ca"])},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                 "resources": ["pods/eviction"], "scope": "Namespaced"}],
                      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}]})
    try:
        wait_for_leader(coordination, lease)
        yield op
    finally:
        with contextlib.suppress(client.ApiException):
            admission.delete_validating_webhook_configuration(hook)
        op.stop()
        print(op.log_tail(30))
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(lease)


def test_kubectl_drain_is_held_while_the_gang_saves_a_step_then_completes_and_the_gang_resumes_after_it(
        tls_operator, api_client, core, custom, namespace, kubeconfig, tmp_path):
    ca = str(tmp_path / "ca.pem")
    create_job(custom, namespace, make_job("maint", 2, checkpoint={"path": "/c"}))
    pods = wait_bound(api_client, core, namespace, "maint", 2)
    wait_condition(custom, namespace, "maint", "Running", timeout=60)
    assert not client.PolicyV1Api(api_client).list_namespaced_pod_disruption_budget(namespace).items, \
        "no budget: the webhook holds the drain, and fails open"
    before = ranks_of(pods)
    node = before["0"]
    tokens = {int(p["metadata"]["labels"]["railyard.dev/rank"]): pod_token(core, namespace, p) for p in pods}
    for rank, token in tokens.items():  # the ranks report as they train: they can save a step when asked
        requests.post(tls_operator.report_url, timeout=10, verify=ca, headers={"Authorization": f"Bearer {token}"},
                      json={"namespace": namespace, "job": "maint", "rank": rank, "restartCount": 0, "step": 0})
    started = time.monotonic()
    drain = subprocess.Popen([str(rig_binary("kubectl")), "--kubeconfig", kubeconfig, "drain", node,
                              "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=150s"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    step, target, saved_at = 0, None, None
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            status = get_job(custom, namespace, "maint").get("status") or {}
            if status.get("restartCount") == 1:
                break
            checkpoints = [{"step": target, "path": f"/c/step-{target}"}] if target is not None and \
                step >= target else []
            for rank, token in tokens.items():
                answer = requests.post(tls_operator.report_url, timeout=10, verify=ca,
                                       headers={"Authorization": f"Bearer {token}"},
                                       json={"namespace": namespace, "job": "maint", "rank": rank,
                                             "restartCount": 0, "step": step, "checkpoints": checkpoints})
                assert answer.status_code in ((200, 429, 403, 409) if checkpoints else (200, 429)), answer.text
                if answer.ok:
                    target = (answer.json()["directives"].get("checkpoint") or {}).get("step", target)
            if checkpoints and saved_at is None:
                saved_at = time.monotonic()
            step += 5
            time.sleep(1)  # the simulated ranks' pace: 5 steps a second
        assert drain.poll() is None or saved_at is not None, f"the drain did not wait: {drain.communicate()[0]}"
        output, _ = drain.communicate(timeout=120)
        assert drain.returncode == 0, output
        drained_seconds = time.monotonic() - started
        job = get_job(custom, namespace, "maint")
        assert target is not None, "no checkpoint was asked for"
        restart = job["status"]["lastRestart"]
        assert restart["reason"] == "Maintenance" and restart["lostNodes"] == [node], restart
        assert restart["resumeStep"] == target, "the new attempt resumes from the step saved for the drain"
        # kubectl drain prints the webhook's 429 ("... saves a checkpoint and moves its ranks off ...") as it
        # retries; the retry after the move finds no pod.
        assert "saves a checkpoint" in output, output
        after = ranks_of(bound_generation(api_client, core, namespace, "maint", 2))
        assert after["0"] != node and after["1"] == before["1"], "the drained rank moved, the other stayed"
        assert not [t for t in core.read_node(node).spec.taints or [] if t.key == "railyard.dev/unhealthy"]
        env = {e["name"]: e.get("value") for e in next(
            p for p in bound_generation(api_client, core, namespace, "maint", 2)
            if p["metadata"]["labels"]["railyard.dev/rank"] == "0")["spec"]["containers"][0]["env"]}
        assert env.get("RAILYARD_RESUME_STEP") == str(target)
        print(f'{{"drain_seconds": {drained_seconds:.1f}, "checkpoint_step": {target}}}\n{output}')
    finally:
        if drain.poll() is None:
            drain.kill()
        core.patch_node(node, {"spec": {"unschedulable": None}})


def test_a_node_announced_for_maintenance_moves_its_ranks_ahead_of_time_and_takes_no_new_ones(
        tls_operator, api_client, core, custom, namespace):
    create_job(custom, namespace, make_job("ahead", 2))
    before = ranks_of(wait_bound(api_client, core, namespace, "ahead", 2))
    wait_condition(custom, namespace, "ahead", "Running", timeout=60)
    node = before["1"]
    core.patch_node(node, {"metadata": {"annotations": {"railyard.dev/maintenance": "e2e: firmware window"}}})
    try:
        job = poll(lambda: (j := get_job(custom, namespace, "ahead"))["status"].get("restartCount") == 1 and j, 60,
                   "the gang moved off the announced node")
        assert job["status"]["lastRestart"]["reason"] == "Maintenance"
        after = ranks_of(bound_generation(api_client, core, namespace, "ahead", 2))
        assert after["1"] != node and after["0"] == before["0"], (before, after)
        assert not core.read_node(node).spec.unschedulable, "Railyard never cordons: the admin's node is left as is"
        assert not [t for t in core.read_node(node).spec.taints or [] if t.key == "railyard.dev/unhealthy"]
    finally:
        core.patch_node(node, {"metadata": {"annotations": {"railyard.dev/maintenance": None}}})


def test_a_forged_eviction_review_from_outside_the_api_server_is_refused(tls_operator, api_client, core, custom,
                                                                        namespace, tmp_path):
    """A pod (here: the test, with no client certificate) posting an AdmissionReview for a gang's rank on a
    cordoned node is refused, and the gang is not moved; the API server's own reviews are answered (the drain
    test above)."""
    if not os.environ.get("RAILYARD_LOCAL_RIG"):
        pytest.skip("needs an API server configured to present a client certificate to webhooks")
    create_job(custom, namespace, make_job("target", 2, checkpoint={"path": "/c"}))
    pods = wait_bound(api_client, core, namespace, "target", 2)
    wait_condition(custom, namespace, "target", "Running", timeout=60)
    node = ranks_of(pods)["0"]
    pod = next(p["metadata"]["name"] for p in pods if p["metadata"]["labels"]["railyard.dev/rank"] == "0")
    core.patch_node(node, {"spec": {"unschedulable": True}})  # cordoned, not drained: nobody evicts
    try:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "forged", "namespace": namespace, "name": pod, "subResource": "eviction",
                              "operation": "CREATE"}}
        answer = requests.post(f"https://127.0.0.1:{tls_operator.report_port}/v1/evictions", json=review,
                               timeout=10, verify=str(tmp_path / "ca.pem"))
        # Refused before it is read: nothing is noted, so nothing can move the gang (the unit test
        # tests/unit/test_report_tls.py checks the book stays empty).
        assert answer.status_code == 403 and "API server only" in answer.text, answer.text
        assert not get_job(custom, namespace, "target")["status"].get("restartCount")
    finally:
        core.patch_node(node, {"spec": {"unschedulable": None}})
