"""The `railyard plan` contract: JSON shape, exit codes, messages naming file/object/field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from railyard.operator.app.cli import main

REPO = Path(__file__).resolve().parents[2]
DUMP = REPO / "examples" / "cluster-dump"
JOB = """apiVersion: railyard.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: ns}}
spec:
  replicas: {replicas}
  {extra}
  template:
    spec:
      containers:
        - name: c
          resources: {{limits: {{nvidia.com/gpu: 8}}}}
"""


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, text: str, name: str = "jobs.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_example_dump_plans_with_the_documented_json_shape(capsys):
    code, out, _ = run(capsys, "plan", "--nodes", str(DUMP / "nodes.yaml"), "--pods", str(DUMP / "pods.yaml"),
                       "--jobs", str(DUMP / "jobs.yaml"), "--output", "json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"jobs", "solveSeconds"} and isinstance(doc["solveSeconds"], float)
    names = [j["name"] for j in doc["jobs"]]
    assert names == ["pretrain-8n", "sft-4x4", "elastic-ft", "big-tor"]
    for job in doc["jobs"]:
        assert set(job) == {"namespace", "name", "placed", "reason", "ranks", "metrics"}
        assert set(job["metrics"]) == {"tors", "leaves", "spines", "railAligned"}
        assert [r["rank"] for r in job["ranks"]] == list(range(len(job["ranks"])))
        assert job["placed"] == (job["reason"] is None) == bool(job["ranks"])
    big = doc["jobs"][3]
    assert not big["placed"] and big["reason"].startswith("requiredTier tor:")
    # Capacity is consumed in file order: no GPU is handed out twice.
    seen = [(r["node"], g) for j in doc["jobs"] for r in j["ranks"] for g in r["gpus"]]
    assert len(seen) == len(set(seen))


def test_profile_works_as_nodes_and_table_fits_80_columns(capsys):
    code, out, _ = run(capsys, "plan", "--nodes", str(REPO / "examples/clusters/small.yaml"),
                       "--jobs", str(REPO / "examples/jobs/llama-16n.yaml"))
    assert code == 0
    assert "default/llama-16n: 16 x 8 GPUs" in out
    assert max(len(line) for line in out.splitlines() if not line.startswith(("default/", "1/"))) <= 80


@pytest.mark.parametrize(("extra", "replicas", "message"), [
    ("topology: {requiredTier: rack}", 2,
     "spec.topology.requiredTier: 'rack' is not a level of this cluster's topology (levels, top to bottom: spine"),
    ("", 0, "spec.replicas: Input should be greater than or equal to 1 (got 0)"),
    ("minReplicas: 5", 2, "need minReplicas <= replicas <= maxReplicas, got minReplicas=5"),
    ("maxReplicas: 1", 2, "maxReplicas=1"),
    ("parallelism: {tensor: 8, pipeline: 3, data: 1}", 2, "parallelism tensor*pipeline*data"),
    ("topology: {railAlignment: always}", 2, "spec.topology.railAlignment"),
])
def test_invalid_jobs_exit_2_naming_file_object_and_field(tmp_path, capsys, extra, replicas, message):
    jobs = write(tmp_path, JOB.format(name="bad", replicas=replicas, extra=extra))
    code, _, err = run(capsys, "plan", "--nodes", str(DUMP / "nodes.yaml"), "--jobs", jobs)
    assert code == 2
    assert f"{jobs}: TrainingJob ns/bad (object 1)" in err
    assert message in err


@pytest.mark.parametrize(("text", "message"), [
    ("a: [unclosed", "not valid YAML"),
    ('{"kind": "List", "items": [', "not valid YAML"),  # looks like JSON, is neither
    ("- 1\n- 2\n", "expected a mapping"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "kind is 'Pod', expected TrainingJob"),
])
def test_malformed_files_exit_2(tmp_path, capsys, text, message):
    jobs = write(tmp_path, text)
    code, _, err = run(capsys, "plan", "--nodes", str(DUMP / "nodes.yaml"), "--jobs", jobs)
    assert code == 2 and jobs in err and message in err


def test_missing_file_exit_2(capsys):
    code, _, err = run(capsys, "plan", "--nodes", "/nonexistent/nodes.yaml", "--jobs", "/nonexistent/j.yaml")
    assert code == 2 and "/nonexistent/j.yaml: cannot read" in err
    code, _, err = run(capsys, "plan", "--nodes", "/nonexistent/nodes.yaml", "--jobs", str(DUMP / "jobs.yaml"))
    assert code == 2 and "/nonexistent/nodes.yaml: cannot read" in err


def test_unplaceable_jobs_still_exit_0(tmp_path, capsys):
    jobs = write(tmp_path, JOB.format(name="huge", replicas=999, extra=""))
    code, out, _ = run(capsys, "plan", "--nodes", str(DUMP / "nodes.yaml"), "--jobs", jobs, "-o", "json")
    assert code == 0 and json.loads(out)["jobs"][0]["placed"] is False


def test_console_script_is_installed():
    out = subprocess.run([str(Path(sys.executable).parent / "railyard"), "plan", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--nodes" in out and "--jobs" in out


def test_a_json_dump_plans_like_the_yaml_one(tmp_path, capsys):
    import json

    import yaml

    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(yaml.safe_load((DUMP / "nodes.yaml").read_text())))  # kubectl get nodes -o json
    args = ["--jobs", str(DUMP / "jobs.yaml"), "-o", "json"]
    _, from_json, _ = run(capsys, "plan", "--nodes", str(nodes), *args)
    _, from_yaml, _ = run(capsys, "plan", "--nodes", str(DUMP / "nodes.yaml"), *args)
    def plan(text: str) -> dict:
        out = json.loads(text)
        out.pop("solveSeconds", None)  # timing differs run to run
        return out

    assert plan(from_json) == plan(from_yaml)



def test_defragment_shows_which_running_jobs_move_where_so_a_job_fits(tmp_path, capsys):
    import yaml

    from tests.support.clusters import profile_nodes

    nodes = profile_nodes(leaves=1, tors=2, nodes=2)
    by_tor: dict[str, list[str]] = {}
    for node in nodes:
        by_tor.setdefault(node["metadata"]["labels"]["topology.railyard.dev/tor"], []).append(node["metadata"]["name"])
    (first, second) = [sorted(names)[0] for _, names in sorted(by_tor.items())]
    node_file = write(tmp_path, yaml.safe_dump_all(nodes), "nodes.yaml")

    def running(name: str, node: str) -> str:  # as `kubectl get trainingjobs -o yaml` gives a placed job
        body = JOB.format(name=name, replicas=1, extra="preemption: {migratable: true}")
        status = {"status": {"placement": {"ranks": [{"rank": 0, "node": node, "gpus": list(range(8))}]}}}
        return body + yaml.safe_dump(status)

    wide = JOB.format(name="wide", replicas=2, extra="topology: {requiredTier: tor}")
    jobs = write(tmp_path, "---\n".join([running("a", first), running("b", second), wide]))
    code, out, _ = run(capsys, "plan", "--nodes", node_file, "--jobs", jobs, "-o", "json")
    assert code == 0 and json.loads(out)["jobs"][0]["placed"] is False, "without --defragment it does not fit"
    code, out, _ = run(capsys, "plan", "--nodes", node_file, "--jobs", jobs, "-o", "json", "--defragment")
    planned = json.loads(out)["jobs"][0]
    assert code == 0 and planned["placed"] is True
    moves = planned["migration"]["moves"]
    assert len(moves) == 1 and moves[0]["job"] in ("ns/a", "ns/b")
    code, out, _ = run(capsys, "plan", "--nodes", node_file, "--jobs", jobs, "--defragment")
    assert "after moving ns/" in out and "cleared" in out


def test_a_dra_dump_with_resource_slices_and_a_foreign_claim_plans_around_its_gpu(tmp_path, capsys):
    """`kubectl get nodes,resourceslices,resourceclaims -A -o yaml`: the claim's allocated GPU 3 is held."""
    import yaml

    from tests.support.clusters import profile_nodes
    from tests.support.rig import load_hack_module

    nodes = profile_nodes(leaves=1, tors=1, nodes=1)
    name = nodes[0]["metadata"]["name"]
    publisher = load_hack_module("dra_slices", "dra_slices.py")
    from railyard.topology.cluster.nodes import node_from_object

    slices = publisher.slices_for(node_from_object(nodes[0]))
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "theirs", "namespace": "t"},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "g", "driver": "gpu.nvidia.com", "pool": name, "device": "gpu-3"}]}}}}
    dump = write(tmp_path, yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*nodes, *slices, claim]}),
                 "dump.yaml")
    jobs = write(tmp_path, JOB.format(name="half", replicas=1, extra="").replace("nvidia.com/gpu: 8",
                                                                                   "nvidia.com/gpu: 4"))
    code, out, err = run(capsys, "plan", "--nodes", dump, "--jobs", jobs, "-o", "json")
    assert code == 0, err
    gpus = json.loads(out)["jobs"][0]["ranks"][0]["gpus"]
    assert len(gpus) == 4 and 3 not in gpus


def test_plan_reads_the_workloads_railyard_places_without_owning_them_as_their_gangs(capsys, tmp_path):
    """JobSet's and LeaderWorkerSet's own examples (adapted as docs/workloads.md says) and an indexed Job are
    planned as the operator would keep them: a JobSet one gang, an LWS one gang per group; one that did not opt in
    is left out, and said so."""
    upstream = REPO / "tests" / "e2e" / "upstream"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "indexed", "namespace": "ns"},
           "spec": {"completionMode": "Indexed", "parallelism": 2, "completions": 2, "template": {
               "metadata": {"labels": {"railyard.dev/scheduling": "gang"},
                            "annotations": {"kueue.x-k8s.io/podset-required-topology":
                                            "topology.railyard.dev/tor"}},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}
    mine = {**job, "metadata": {"name": "not-opted-in"}, "spec": {**job["spec"], "template": {
        "spec": job["spec"]["template"]["spec"]}}}
    jobs = [str(upstream / "jobset-paralleljobs.yaml"), str(upstream / "lws-sample.yaml"),
            write(tmp_path, json.dumps(job), "job.json"), write(tmp_path, json.dumps(mine), "mine.json")]
    code, out, err = run(capsys, "plan", "--nodes", str(REPO / "examples" / "clusters" / "small.yaml"),
                         *[a for j in jobs for a in ("--jobs", j)],
                         "--output", "json")
    assert code == 0, err
    placed = {j["name"]: j for j in json.loads(out)["jobs"]}
    assert set(placed) == {"paralleljobs", "leaderworkerset-sample-0", "leaderworkerset-sample-1",
                           "leaderworkerset-sample-2", "indexed"}
    assert len(placed["paralleljobs"]["ranks"]) == 5 and len(placed["leaderworkerset-sample-1"]["ranks"]) == 4
    assert placed["indexed"]["placed"] and placed["indexed"]["metrics"]["tors"] == 1, "Kueue's annotation read"
    assert "Job not-opted-in: its pod template does not opt in" in err
