"""Tables that restate code are generated from it (hack/gen_docs.py) or checked against it here: a new setting,
metric, alert, chart value, printer column, CLI flag or condition reason shows in the docs by construction, and
a hand-written list (pod env, RBAC, condition reasons) fails here when the code moves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from railyard.operator.app.troubleshooting import ADVICE, FINE
from railyard.operator.base import reasons
from railyard.operator.base.objects import parse_job
from railyard.operator.decide.builders import PodOptions, build_env
from railyard.operator.decide.resource_claims import device_env
from railyard.topology.api.job import TrainingJob
from railyard.topology.cluster.dra_devices import inventory
from railyard.topology.cluster.nodes import node_from_object

from tests.support.clusters import profile_nodes
from tests.support.jobs import make_job
from tests.support.rig import REPO, load_hack_module

gen_docs = load_hack_module("gen_docs", "gen_docs.py")
DOCS = REPO / "docs"


def test_every_generated_section_is_current():
    assert gen_docs.stale() == [], "run hack/gen_docs.py"


def test_every_reason_a_job_can_carry_has_advice_or_needs_none():
    """railyard explain and docs/troubleshooting.md cover each; a new reason must say what to do."""
    written = {*reasons.PlacedReason, *reasons.RecoveryReason, *reasons.StalledReason, *reasons.StragglingReason,
               *reasons.SizeReason, *reasons.PreemptedReason, *reasons.FinishReason}
    covered = {a.reason for a in ADVICE} | FINE
    assert written - covered == set()
    assert len({a.anchor for a in ADVICE}) == len(ADVICE)


def test_the_condition_reasons_trainingjob_md_lists_are_the_enums():
    text = (DOCS / "trainingjob.md").read_text()
    placed = text[text.index("Conditions: `Placed`"):text.index("`Running`, `Succeeded`")]
    assert set(re.findall(r"`(\w+)`", placed)) - {"Placed"} == {str(r) for r in reasons.PlacedReason}
    conditions = text[text.index("Conditions: `Placed`"):text.index("What each waiting")]
    assert {str(c) for c in reasons.ConditionType} <= set(re.findall(r"`(\w+)`", conditions))


def _all_env() -> set[str]:
    """Every variable the builders can set: a restarted, resized, elastic, checkpointing, reporting,
    rail-aligned job on a DRA node."""
    body = make_job("env", 4, minReplicas=2, maxReplicas=8, checkpoint={"path": "/ckpt", "intervalSeconds": 60})
    body["metadata"].update(namespace="ns", uid="u")
    body["status"] = {"restartCount": 2, "lastRestart": {"reason": "NodeNotReady", "previousReplicas": 3,
                                                         "resumeStep": 10, "resumeCheckpoint": "/ckpt/10"}}
    options = PodOptions(report_url="https://railyard-reports.x.svc:8090/v1/reports", report_ca="PEM")
    names = {e["name"] for e in build_env(parse_job(body), 0, 4, 8, True, options)}
    node = profile_nodes(leaves=1, tors=1, nodes=1)[0]
    slices = load_hack_module("dra_slices", "dra_slices.py").slices_for(node_from_object(node))
    return names | set(device_env([0, 1], inventory(slices)[node["metadata"]["name"]]))


def test_the_pod_environment_trainingjob_md_lists_is_what_the_builders_set():
    text = (DOCS / "trainingjob.md").read_text()
    table = text[text.index("| variable | value |"):]
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table.split("\n\n")[0]))
    assert documented == _all_env()


def test_the_rbac_operations_md_lists_is_what_the_chart_grants():
    from tests.unit.test_chart import by_kind, render

    helm = str(load_hack_module("cluster", "cluster.py").binary("helm"))
    if not Path(helm).exists():
        pytest.skip("helm is built by hack/build-binaries.sh")
    docs = render(helm)
    operator = next(r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "railyard")
    text = (DOCS / "operations.md").read_text()
    rules = text[text.index("with this list):"):text.index("; and in `leaderElection.namespace`")]
    listed = {res: set(verbs.split("/")) for res, verbs in re.findall(r"([a-z/]+) ([a-z/]+)(?:;|,|$)",
                                                                      rules.split(":", 1)[1].replace("\n", " "))}
    granted = {res: set(rule["verbs"]) for rule in operator["rules"] for res in rule["resources"]}
    assert listed == granted


@pytest.mark.parametrize("path", sorted((REPO / "examples" / "jobs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_is_valid_and_scales_to_its_max_replicas(path):
    body = yaml.safe_load(path.read_text())
    TrainingJob.model_validate(body)
    if "maxReplicas" in body["spec"]:
        TrainingJob.model_validate({**body, "spec": {**body["spec"], "replicas": body["spec"]["maxReplicas"]}})


def test_the_reference_example_of_trainingjob_md_is_valid_and_scales_to_its_max_replicas():
    text = (DOCS / "trainingjob.md").read_text()
    body = yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    TrainingJob.model_validate(body)
    TrainingJob.model_validate({**body, "spec": {**body["spec"], "replicas": body["spec"]["maxReplicas"]}})
