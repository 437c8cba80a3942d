"""The CRD schema (with its CEL rules) and the pydantic models accept and reject the same specs.

The API server is the judge of the CRD (server-side dry run); pydantic is the operator's and the
planner's view. A disagreement means one of them lets through what the other refuses."""

from __future__ import annotations

import copy

import pytest
import yaml
from kubernetes import client
from pydantic import ValidationError
from railyard.topology.api.job import GROUP, PLURAL, VERSION, TrainingJob

from tests.support.jobs import make_job
from tests.support.rig import REPO

pytestmark = pytest.mark.e2e
BASE = make_job("schema", 4)


def variant(**changes) -> dict:
    body = copy.deepcopy(BASE)
    for path, value in changes.items():
        target = body["spec"]
        keys = path.split("__")
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(keys[-1], None)
        else:
            target[keys[-1]] = value
    return body


def with_pod(**fields) -> dict:
    """The base job with these pod-spec fields in its template."""
    body = copy.deepcopy(BASE)
    body["spec"]["template"]["spec"].update(fields)
    return body


def named(name: str, **spec) -> dict:
    body = variant(**spec)
    body["metadata"]["name"] = name
    return body


CASES = {
    "minimal": variant(),
    "elastic": variant(minReplicas=2, maxReplicas=8),
    "tiers": variant(topology={"requiredTier": "spine", "preferredTier": "tor", "railAlignment": "required"}),
    "parallelism": variant(parallelism={"tensor": 8, "pipeline": 2, "data": 2}),
    "parallelism-no-data": variant(parallelism={"tensor": 8, "pipeline": 2}),
    "string-gpu-count": variant(template={"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}),
    "priority-removed": variant(priority=100),
    "priority-class": variant(priorityClassName="training-high"),
    "template-priority-class": with_pod(priorityClassName="high"),
    "template-priority": with_pod(priority=5),
    "zero-replicas": variant(replicas=0),
    "min-above-replicas": variant(minReplicas=5),
    "replicas-above-max": variant(maxReplicas=3),
    "unknown-tier": variant(topology={"requiredTier": "rack"}),  # a level name: checked by the operator
    "malformed-tier": variant(topology={"requiredTier": "Rack!"}),
    "custom-levels": variant(topology={"requiredTier": "zone", "preferredTier": "spine"}),
    "unknown-alignment": variant(topology={"railAlignment": "always"}),
    "preferred-above-required": variant(topology={"requiredTier": "tor", "preferredTier": "spine"}),
    "parallelism-mismatch": variant(parallelism={"tensor": 8, "pipeline": 3, "data": 1}),
    "zero-tensor": variant(parallelism={"tensor": 0, "pipeline": 1, "data": 1}),
    "no-template": variant(template=None),
    "no-containers": variant(template={"spec": {"containers": []}}),
    "gpu-fraction": variant(template={"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}}),
    "gpu-negative": variant(template={"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": -1}}}]}}),
    "gpu-suffix": variant(template={"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1k"}}}]}}),
    "huge-replicas": variant(replicas=1_000_000_000),
    "dotted-name": named("bad.dotted.name"),
    "long-name": named("a" * 74),
    "name-just-fits": named("a" * 61, replicas=10),  # a-9: 63 characters
    "name-one-too-long": named("a" * 61, replicas=11),  # a-10: 64 characters
    "digit-first-name": named("1job"),
    "fault-policy": variant(faultPolicy={"nodeLossGraceSeconds": 0, "maxRestarts": 5, "onNoReplacement": "Fail",
                                         "restartBackoff": {"initialSeconds": 1, "maxSeconds": 60},
                                         "nonRetryableExitCodes": [2, 3]}),
    "fault-policy-shrink": variant(faultPolicy={"onNoReplacement": "Shrink"}),
    "fault-policy-negative-restarts": variant(faultPolicy={"maxRestarts": -1}),
    "fault-policy-long-grace": variant(faultPolicy={"nodeLossGraceSeconds": 7200}),
    "replacement-timeout": variant(faultPolicy={"replacementTimeoutSeconds": 0}),
    "replacement-timeout-negative": variant(faultPolicy={"replacementTimeoutSeconds": -5}),
    "elastic-policy": variant(elasticPolicy={"cooldownSeconds": 60, "minGrowth": 2}, minReplicas=1, maxReplicas=4),
    "elastic-indivisible": variant(replicas=3, parallelism={"tensor": 8, "pipeline": 2}),
    "elastic-divisible": variant(replicas=4, parallelism={"tensor": 8, "pipeline": 2}),
    "checkpoint": variant(checkpoint={"path": "/shared/ckpt", "intervalSeconds": 600}),
    "checkpoint-zero-interval": variant(checkpoint={"intervalSeconds": 0}),
    # the template fields Railyard reads are typed on both sides
    "node-selector": with_pod(nodeSelector={"gpu": "h100"}),
    "node-selector-list": with_pod(nodeSelector=["gpu"]),
    "tolerations": with_pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    "tolerations-strings": with_pod(tolerations=["x"]),
    "toleration-bad-operator": with_pod(tolerations=[{"key": "k", "operator": "Is"}]),
    "init-containers-string": with_pod(initContainers="x"),
    "init-containers": with_pod(initContainers=[{"name": "i", "resources": {"requests": {"cpu": "1"}}}]),
    "restart-policy-never": with_pod(restartPolicy="Never"),
    "restart-policy-always": with_pod(restartPolicy="Always"),
    "own-scheduling-gates": with_pod(schedulingGates=[{"name": "mine"}]),
    "other-scheduler": with_pod(schedulerName="volcano"),
    "spread": with_pod(topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                  "whenUnsatisfiable": "DoNotSchedule"}]),
    "spread-zero-skew": with_pod(topologySpreadConstraints=[{"maxSkew": 0, "topologyKey": "k",
                                                            "whenUnsatisfiable": "DoNotSchedule"}]),
    "affinity-string": with_pod(affinity="anywhere"),
    "time-limit": {**BASE, "spec": {**BASE["spec"], "timeLimitSeconds": 3600}},
    "time-limit-zero": {**BASE, "spec": {**BASE["spec"], "timeLimitSeconds": 0}},
    "time-limit-over-a-year": {**BASE, "spec": {**BASE["spec"], "timeLimitSeconds": 31622401}},
}


@pytest.fixture(scope="module")
def dry_run_namespace(core):
    """Dry runs create nothing, so one namespace serves every case."""
    name = "railyard-schema-check"
    try:
        core.create_namespace({"metadata": {"name": name}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    return name


@pytest.mark.parametrize("name", sorted(CASES))
def test_crd_and_models_agree(name, crds, custom, dry_run_namespace):
    namespace = dry_run_namespace
    body = CASES[name]
    try:
        TrainingJob.model_validate(body)
        model_ok, model_error = True, ""
    except ValidationError as e:
        model_ok, model_error = False, str(e)
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, dry_run="All")
        server_ok, server_error = True, ""
    except client.ApiException as e:
        assert e.status == 422, e.body
        server_ok, server_error = False, e.body
    assert model_ok == server_ok, f"{name}: models {'accept' if model_ok else 'reject'} " \
        f"({model_error[:300]}), API server {'accepts' if server_ok else 'rejects'} ({server_error[:300]})"


def test_template_topology_and_parallelism_are_immutable(crds, custom, namespace):
    from tests.support.jobs import create_job

    body = make_job("frozen", 2, parallelism={"tensor": 8, "pipeline": 1, "data": 2})
    create_job(custom, namespace, body)
    changes = {
        "spec.template is immutable": {"template": make_job("x", 2, gpus=4)["spec"]["template"]},
        "spec.topology is immutable": {"topology": {"requiredTier": "tor"}},
        "spec.parallelism is immutable": {"parallelism": {"tensor": 4, "pipeline": 1, "data": 4}},
    }
    for message, patch in changes.items():
        with pytest.raises(client.ApiException) as err:
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "frozen", {"spec": patch})
        assert err.value.status == 422 and message in err.value.body, err.value.body
    # priorityClassName stays editable (it only orders the queue until the job is placed)
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "frozen",
                                          {"spec": {"priorityClassName": "training-high"}})


def test_a_time_limit_may_be_set_or_lowered_but_never_raised_or_removed(crds, custom, namespace):
    from tests.support.jobs import create_job

    create_job(custom, namespace, make_job("limited", 1))

    def patch(value: int | None) -> None:
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "limited",
                                              {"spec": {"timeLimitSeconds": value}})

    patch(7200)  # set on a job that had none
    patch(3600)  # lowered
    for value in (7200, None):  # raised, removed
        with pytest.raises(client.ApiException) as err:
            patch(value)
        assert err.value.status == 422 and "may be set or lowered, never raised or removed" in err.value.body


@pytest.mark.parametrize("path", sorted((REPO / "examples" / "jobs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_is_accepted_and_scales_to_its_max_replicas(path, crds, custom, namespace):
    """`kubectl apply -f examples/jobs/X` and `kubectl scale tj X --replicas=<maxReplicas>` pass the API server's
    own validation (no operator runs in this module: nothing is placed)."""
    body = yaml.safe_load(path.read_text())
    body["metadata"]["namespace"] = namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    top = body["spec"].get("maxReplicas")
    if top is not None:
        custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, body["metadata"]["name"],
                                                    {"spec": {"replicas": top}})
        stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body["metadata"]["name"])
        assert stored["spec"]["replicas"] == top
