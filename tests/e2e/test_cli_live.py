"""`railyard jobs`, `topology`, `explain` and `status` read the live cluster (the kubectl plugin's commands),
with node labels read as the operator reads them (its Lease says how)."""

from __future__ import annotations

import json

import pytest
import yaml
from railyard.operator.app.cli import ExitCode, main

from tests.support.jobs import create_job, make_job, wait_bound, wait_condition

pytestmark = pytest.mark.e2e


def run_json(capsys, *argv: str):
    assert main([*argv, "-o", "json"]) == 0
    out, err = capsys.readouterr()
    if "--operator-namespace" in argv:
        assert "no operator Lease" not in err, "the operator's Lease names its label scheme"
    return json.loads(out)


def test_jobs_topology_and_explain_tell_where_jobs_are_and_why_they_wait(
        operator, api_client, core, custom, namespace, kubeconfig, capsys):
    lease = ("--operator-namespace", operator.lease_namespace)
    create_job(custom, namespace, make_job("landed", 2))
    pods = wait_bound(api_client, core, namespace, "landed", 2)
    waiting = make_job("picky", 1)
    waiting["spec"]["template"]["spec"]["nodeSelector"] = {"topology.railyard.dev/tor": "no-such-tor"}
    create_job(custom, namespace, waiting)
    wait_condition(custom, namespace, "picky", "Placed", status="False", reason="Unschedulable")
    wait_condition(custom, namespace, "landed", "Placed", reason="Released")  # recorded with its Running

    rows = {r["name"]: r for r in run_json(capsys, "jobs", "--kubeconfig", kubeconfig, "-n", namespace)}
    assert rows["landed"]["placement"] == "Released" and rows["landed"]["replicas"] == 2
    assert rows["picky"]["state"] == "Queued" and rows["picky"]["placement"] == "Unschedulable"

    assert main(["jobs", "--kubeconfig", kubeconfig, "-A", "-o", "yaml"]) == 0
    assert {"landed", "picky"} <= {r["name"] for r in yaml.safe_load(capsys.readouterr().out)}
    view = run_json(capsys, "topology", "--kubeconfig", kubeconfig, *lease)
    held = {n["node"]: [g["job"] for g in n["gpus"]] for t in view["tors"] for n in t["nodes"]}
    for pod in pods:
        assert held[pod["spec"]["nodeName"]] == [f"{namespace}/landed"] * 8

    info = run_json(capsys, "explain", "picky", "--kubeconfig", kubeconfig, "-n", namespace, *lease)
    assert info["wouldPlaceNow"] is False and info["state"] == "Queued"
    assert info["excludedNodes"]["nodeSelector"]["count"] >= 1
    assert any(e["reason"] == "Unschedulable" for e in info["events"])
    assert [a["reason"] for a in info["advice"]] == ["Unschedulable"]
    assert info["advice"][0]["more"] == "docs/troubleshooting.md#placed-unschedulable"
    assert main(["explain", "picky", "--kubeconfig", kubeconfig, "-n", namespace, *lease]) == 0
    out = capsys.readouterr().out
    assert "Why it waits" in out and "What to do:" in out
    assert main(["explain", "nobody", "--kubeconfig", kubeconfig, "-n", namespace]) == ExitCode.NOT_FOUND
    assert "not found" in capsys.readouterr().err
    status = run_json(capsys, "status", "--kubeconfig", kubeconfig, "-n", namespace, *lease)
    assert {j["name"]: j["placed"] for j in status["jobs"]} == {"landed": True, "picky": False}
