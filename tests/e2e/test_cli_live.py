"""`railyard jobs`, `topology` and `explain` read the live cluster (the kubectl plugin's commands)."""

from __future__ import annotations

import json

import pytest
from railyard.operator.app.cli import main

from tests.support.jobs import create_job, make_job, wait_bound, wait_condition

pytestmark = pytest.mark.e2e


def run_json(capsys, *argv: str):
    assert main([*argv, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_jobs_topology_and_explain_tell_where_jobs_are_and_why_they_wait(
        operator, api_client, core, custom, namespace, kubeconfig, capsys):
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

    view = run_json(capsys, "topology", "--kubeconfig", kubeconfig)
    held = {n["node"]: [g["job"] for g in n["gpus"]] for t in view["tors"] for n in t["nodes"]}
    for pod in pods:
        assert held[pod["spec"]["nodeName"]] == [f"{namespace}/landed"] * 8

    info = run_json(capsys, "explain", "picky", "--kubeconfig", kubeconfig, "-n", namespace)
    assert info["wouldPlaceNow"] is False and info["state"] == "Queued"
    assert info["excludedNodes"]["nodeSelector"]["count"] >= 1
    assert any(e["reason"] == "Unschedulable" for e in info["events"])
    assert main(["explain", "picky", "--kubeconfig", kubeconfig, "-n", namespace]) == 0
    assert "Why it waits" in capsys.readouterr().out
    assert main(["explain", "nobody", "--kubeconfig", kubeconfig, "-n", namespace]) == 2
    assert "not found" in capsys.readouterr().err
