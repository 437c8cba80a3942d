"""`railyard` behaves as kubectl users expect: -o json|yaml, --version, the context's namespace, one line
and a documented exit code for every failure (never a traceback), `plan` in the operator's queue order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from railyard.operator.app.cli import ExitCode, build_parser, main
from railyard.operator.kube.client import ClusterAccessError, cli_connection

REPO = Path(__file__).resolve().parents[2]
SMALL = str(REPO / "examples" / "clusters" / "small.yaml")
JOB = """apiVersion: railyard.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: ns, creationTimestamp: "{created}"}}
spec:
  replicas: {replicas}
  {extra}
  template:
    spec:
      containers:
        - name: c
          resources: {{limits: {{nvidia.com/gpu: 8}}}}
"""
CLASSES = """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
"""


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def job(name: str, replicas: int, created: str, extra: str = "") -> str:
    return JOB.format(name=name, replicas=replicas, created=created, extra=extra)


def _kubeconfig(tmp_path: Path, server: str, namespace: str | None = None) -> str:
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "here",
        "contexts": [{"name": "here", "context": context}, {"name": "there", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    return str(path)


def test_plan_places_in_queue_order_priority_then_age_and_a_missing_class_waits_last(tmp_path, capsys):
    # 64 nodes: the two 40-node jobs cannot both fit; the high-priority one must win though it comes later
    # in the file and is younger, and among equals the older goes first.
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("---\n".join([
        job("early-low", 40, "2026-01-01T00:00:00Z", "priorityClassName: low"),
        job("late-high", 40, "2026-01-03T00:00:00Z", "priorityClassName: high"),
        job("young", 8, "2026-01-02T00:00:00Z", "priorityClassName: low"),
        job("old", 8, "2025-12-01T00:00:00Z", "priorityClassName: low"),
        job("ghost", 1, "2025-01-01T00:00:00Z", "priorityClassName: nowhere"),
        CLASSES]))
    code, out, err = run(capsys, "plan", "--nodes", SMALL, "--jobs", str(jobs), "-o", "json")
    assert code == ExitCode.OK, err
    planned = json.loads(out)["jobs"]
    assert [j["name"] for j in planned] == ["late-high", "old", "early-low", "young", "ghost"]
    placed = {j["name"]: j["placed"] for j in planned}
    assert placed == {"late-high": True, "old": True, "early-low": False, "young": True, "ghost": False}
    assert "spec.priorityClassName='nowhere': no such PriorityClass" in planned[-1]["reason"]
    code, _, _ = run(capsys, "plan", "--nodes", SMALL, "--jobs", str(jobs), "--fail-unplaced", "-o", "json")
    assert code == ExitCode.UNPLACED


def test_plan_reads_directories_and_repeated_files_as_kubectl_apply_does(capsys):
    code, out, err = run(capsys, "plan", "--nodes", SMALL, "--jobs", str(REPO / "examples" / "priorityclasses.yaml"),
                         "--jobs", str(REPO / "examples" / "jobs"), "-o", "yaml", "--fail-unplaced")
    assert code == ExitCode.OK, err
    planned = yaml.safe_load(out)["jobs"]
    assert {j["name"] for j in planned} == {p.stem for p in (REPO / "examples" / "jobs").glob("*.yaml")}
    assert all(j["placed"] for j in planned)


def test_version_and_every_live_command_takes_the_kubectl_flags(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("railyard ")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in ("plan", "status", "jobs", "topology", "explain"):
        flags = {o for a in sub.choices[name]._actions for o in a.option_strings}
        assert {"--kubeconfig", "--context", "-o"} <= flags, name
        assert name == "jobs" or {"--labels", "--levels", "--operator-namespace"} <= flags, name
        choices = next(a.choices for a in sub.choices[name]._actions if "-o" in a.option_strings)
        assert tuple(choices) == ("table", "json", "yaml"), name
    for name in ("status", "jobs"):
        flags = {o for a in sub.choices[name]._actions for o in a.option_strings}
        assert {"-n", "-A"} <= flags, name


def test_the_namespace_comes_from_the_context(tmp_path):
    kubeconfig = _kubeconfig(tmp_path, "https://127.0.0.1:1", namespace="team-a")
    _, namespace = cli_connection(kubeconfig, None)
    assert namespace == "team-a"
    assert cli_connection(kubeconfig, "there")[1] == "default"
    with pytest.raises(ClusterAccessError, match=r"context 'nope' is not in .* \(contexts: here, there\)"):
        cli_connection(kubeconfig, "nope")


@pytest.mark.parametrize("argv", [["jobs"], ["status", "-A"], ["topology"], ["explain", "j"],
                                  ["plan", "--live", "--jobs", str(REPO / "examples" / "jobs")]])
def test_cluster_failures_are_one_line_with_exit_3_never_a_traceback(tmp_path, argv):
    unreachable = _kubeconfig(tmp_path, "https://127.0.0.1:1")
    cli = [sys.executable, "-m", "railyard.operator.app.cli"]
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    for env, says in (({"KUBECONFIG": str(tmp_path / "missing")}, "no kubeconfig at"),
                      ({"KUBECONFIG": unreachable}, "cannot reach the API server https://127.0.0.1:1")):
        run_ = subprocess.run([*cli, *argv, "--labels", "native"] if argv[0] not in ("plan", "jobs") else [*cli, *argv],
                              capture_output=True, text=True, env={**base, **env}, timeout=60)
        assert run_.returncode == ExitCode.CLUSTER, run_.stderr
        lines = run_.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and f"railyard {argv[0]}: error:" in lines[0], run_.stderr
