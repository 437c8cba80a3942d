"""railyard.worker against a real operator endpoint: the example training script runs as 2 local
processes on behalf of a gang's ranks (kwok pods run no containers), authenticated with tokens bound
to those pods (TokenRequest -> the operator's TokenReview). They report checkpoints, stop on SIGTERM
at a step they agree on, the gang restarts, and the next generation resumes from that step."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.support.jobs import create_job, get_job, make_job, pods_of, wait_bound, wait_condition
from tests.support.poll import poll
from tests.support.worker import env_of, pod_token

pytestmark = pytest.mark.e2e
TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train" / "train.py"


def start_ranks(core, namespace: str, pods: list[dict], work: Path, exchange: Path) -> list[subprocess.Popen]:
    procs = []
    for pod in sorted(pods, key=lambda p: int(p["metadata"]["labels"]["railyard.dev/rank"])):
        token = work / f"{pod['metadata']['name']}.token"
        token.write_text(pod_token(core, namespace, pod))
        env = {**env_of(pod), "RAILYARD_TOKEN_FILE": str(token), "PATH": "/usr/bin:/bin"}
        out = (work / f"{pod['metadata']['name']}.out").open("w")
        procs.append(subprocess.Popen([sys.executable, str(TRAIN), "--exchange", str(exchange), "--steps", "100000",
                                       "--checkpoint-every", "100", "--step-sleep", "0.005"],
                                      env=env, stdout=out, stderr=subprocess.STDOUT))
    return procs


def events(work: Path, pod_name: str) -> list[dict]:
    lines = (work / f"{pod_name}.out").read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def stop_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_ranks_report_checkpoints_and_the_next_generation_resumes_from_the_last_common_step(
        operator, api_client, core, custom, namespace, tmp_path):
    if not any((n.metadata.labels or {}).get("type") == "kwok" for n in core.list_node().items):
        pytest.skip("needs kwok nodes to simulate a failing container")
    checkpoints = tmp_path / "ckpt"
    create_job(custom, namespace, make_job("trainer", 2, checkpoint={"path": str(checkpoints)},
                                           faultPolicy={"restartBackoff": {"initialSeconds": 0}}))
    pods = wait_bound(api_client, core, namespace, "trainer", 2)
    wait_condition(custom, namespace, "trainer", "Placed", reason="Released")
    env = env_of(pods[0])
    assert env["RAILYARD_REPORT_URL"] == operator.report_url and env["RAILYARD_CHECKPOINT_PATH"] == str(checkpoints)
    assert "RAILYARD_RESUME_STEP" not in env
    volumes = {v["name"]: v for v in pods[0]["spec"]["volumes"]}
    assert volumes["railyard-token"]["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "railyard.dev"

    procs = start_ranks(core, namespace, pods, tmp_path, tmp_path / "exchange")
    try:
        poll(lambda: (get_job(custom, namespace, "trainer")["status"].get("lastCheckpoint") or {}).get("step", 0)
             >= 99, 90, "a checkpoint every rank reported")
        for p in procs:
            p.send_signal(signal.SIGTERM)
        assert [p.wait(30) for p in procs] == [0, 0]
        stops = {events(tmp_path, pod["metadata"]["name"])[-1]["step"] for pod in pods}
        assert len(stops) == 1, f"the ranks stopped at different steps: {stops}"
        stopped = stops.pop()
        job = poll(lambda: (j := get_job(custom, namespace, "trainer"))["status"].get("lastCheckpoint", {}).get("step")
                   == stopped and j, 30, f"lastCheckpoint = the step saved on SIGTERM ({stopped})")
        assert job["status"]["lastCheckpoint"]["path"] == str(checkpoints / f"step-{stopped}")

        # Rank 1's process fails (kwok stage): the gang restarts in place as generation 1.
        core.patch_namespaced_pod(pods[1]["metadata"]["name"], namespace,
                                  {"metadata": {"annotations": {"railyard.dev/simulate": "fail"}}})
        new = poll(lambda: (ps := [p for p in pods_of(api_client, core, namespace, "trainer")
                                   if p["metadata"]["name"].startswith("trainer.p1-") and p["spec"].get("nodeName")])
                   and len(ps) == 2 and ps, 90, "generation 1 bound")
        for pod in new:
            env = env_of(pod)
            assert env["RAILYARD_RESTART_COUNT"] == "1" and env["RAILYARD_RESUME_STEP"] == str(stopped)
            assert env["RAILYARD_RESUME_CHECKPOINT"] == str(checkpoints / f"step-{stopped}")
        job = get_job(custom, namespace, "trainer")
        assert job["status"]["lastRestart"]["resumeStep"] == stopped and job["status"]["processRestarts"] == 1

        # A token of a pod of the old generation is refused: the API server no longer accepts a token
        # bound to a deleted pod (401), and within the operator's TokenReview cache the pod is unknown (403).
        old_token = (tmp_path / f"{pods[0]['metadata']['name']}.token").read_text()
        poll(lambda: not [p for p in pods_of(api_client, core, namespace, "trainer")
                          if not p["metadata"]["name"].startswith("trainer.p1-")], 60, "generation 0 gone")
        stale = requests.post(operator.report_url, json={"namespace": namespace, "job": "trainer", "rank": 0,
                                                         "restartCount": 0, "step": 1},
                              headers={"Authorization": f"Bearer {old_token}"}, timeout=10)
        assert stale.status_code in (401, 403), stale.text
        # Nor may one rank speak for another.
        token = pod_token(core, namespace, new[0])
        rank = int(new[0]["metadata"]["labels"]["railyard.dev/rank"])
        other = requests.post(operator.report_url, json={"namespace": namespace, "job": "trainer",
                                                         "rank": 1 - rank, "restartCount": 1},
                              headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert other.status_code == 403, other.text

        procs = start_ranks(core, namespace, new, tmp_path, tmp_path / "exchange")
        firsts = poll(lambda: all((tmp_path / f"{p['metadata']['name']}.out").exists()
                                  and events(tmp_path, p["metadata"]["name"]) for p in new)
                      and [events(tmp_path, p["metadata"]["name"])[0] for p in new], 30, "generation 1 started")
        assert {(e["restart_count"], e["resume_step"], e["first_step"]) for e in firsts} == {(1, stopped, stopped + 1)}
        job = poll(lambda: (j := get_job(custom, namespace, "trainer"))["status"]["lastCheckpoint"]["step"] > stopped
                   and j, 90, "a checkpoint of generation 1")
        assert job["status"]["lastCheckpoint"]["restartCount"] == 1
    finally:
        stop_all(procs)
