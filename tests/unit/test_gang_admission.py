"""The pod webhook of workloads Railyard places without owning them: an opted-in pod gets Railyard's gate."""

from __future__ import annotations

import base64
import json

import pytest
from railyard.operator.decide import gang_admission


def _review(pod: dict, operation: str = "CREATE") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "namespace": "team-a", "operation": operation, "object": pod}}


def _pod(labels: dict | None = None, gates: list | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "x"}]}
    if gates is not None:
        spec["schedulingGates"] = gates
    return {"kind": "Pod", "metadata": {"name": "p", "labels": labels or {}}, "spec": spec}


def _patched(pod: dict) -> dict:
    """The pod as the API server stores it after the answer's JSONPatch (its two `add` forms)."""
    import copy

    answer = gang_admission.answer("u-1", gang_admission.gate_patch(pod))["response"]
    pod = copy.deepcopy(pod)
    for op in json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []:
        assert op["op"] == "add" and answer["patchType"] == "JSONPatch"
        if op["path"] == "/spec/schedulingGates":
            pod["spec"]["schedulingGates"] = op["value"]
        else:
            assert op["path"] == "/spec/schedulingGates/-"
            pod["spec"]["schedulingGates"].append(op["value"])
    return pod


def test_an_opted_in_pod_gets_the_gate_once_and_keeps_its_own():
    opted = {"railyard.dev/scheduling": "gang"}
    assert _patched(_pod(opted))["spec"]["schedulingGates"] == [{"name": "railyard.dev/gang"}]
    theirs = _patched(_pod(opted, [{"name": "example.com/wait"}]))
    assert theirs["spec"]["schedulingGates"] == [{"name": "example.com/wait"}, {"name": "railyard.dev/gang"}]
    already = _pod(opted, [{"name": "railyard.dev/gang"}])
    assert gang_admission.gate_patch(already) == [], "a template that carries the gate needs nothing"


def test_a_pod_not_opted_in_is_left_as_it_is():
    assert gang_admission.gate_patch(_pod({"railyard.dev/scheduling": "other"})) == []
    assert gang_admission.answer("u", []) == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                              "response": {"uid": "u", "allowed": True}}


@pytest.mark.parametrize(("body", "says"), [
    ({"kind": "Pod"}, "not an AdmissionReview"),
    ({"kind": "AdmissionReview", "request": {"uid": "u"}}, "request.object"),
    (_review(_pod(), operation="UPDATE"), "not CREATE"),
])
def test_a_malformed_review_is_refused_naming_what_is_wrong(body, says):
    with pytest.raises(ValueError, match=says):
        gang_admission.parse_review(body)
