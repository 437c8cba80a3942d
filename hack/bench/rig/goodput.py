#!/usr/bin/env python3
"""Goodput benchmark (issue 23). Prints JSON.

On a fresh superpod-2k rig (2,048 kwok nodes x 8 GPUs): two operator replicas (one Lease), a 128 x 8
TrainingJob and background jobs. A driver plays the 128 ranks: one `railyard.worker` Reporter per pod of
the current attempt, with a token bound to that pod, stepping every BENCH_STEP_SECONDS, saving a
checkpoint every BENCH_CHECKPOINT_STEPS (and the step the operator asks for), resuming from the new
pods' RAILYARD_RESUME_STEP. While a fault has hung the gang (anything but a planned drain) no rank steps.
Time is compressed (a fault every ~25 s): the per-job storm brakes are off (RAILYARD_INFRA_BACKOFF_SECONDS=0,
no hourly cap) and restartBackoff is pinned at its initial 10 s — what a job sees at the real rate, where
interruptions are hours apart and the backoff resets after 10 healthy minutes.

Faults follow Llama 3's interruption mix (466 in 54 days on 16,384 H100) mapped onto Railyard's signals:
GPU (faulty GPU, HBM3, SRAM, GSP, SDC, thermal: 58.7 %) -> a GPU health condition True on the node;
software bugs and NCCL watchdog (14.6 %) -> a rank's process exits 1; network switch/cable and NIC
(10.1 %) -> an untolerated NoExecute taint; host maintenance (7.6 %) -> `railyard.dev/maintenance` on the
node (planned: the gang saves first); the rest (SSD, PSU, CPU: 9.0 %) -> the node's heartbeat stops.
BENCH_FAULTS faults in that proportion (largest remainder), then two leader kills (SIGKILL the Lease
holder, then a GPU fault the standby must handle). For every fault: detection (inject -> the restart
decided, as the driver sees restartCount change), all pods of the new attempt bound, the new attempt's
first step, the steps recomputed (the step reached before the fault - the step resumed from).

`--soak` (`make soak`, not part of `make test`): the same driver with a fault every ~60 s for 30 minutes
(BENCH_SOAK_MINUTES, BENCH_SOAK_EVERY_SECONDS), every 10th after a leader kill; after each recovery: 0
GPUs double-booked, 0 partial gangs, no other job restarted; exits 1 on any violation.

Baseline (same run, same rig): what a JobSet-style user gets — any fault deletes the whole gang, which is
created again anywhere, with no drain handling. Measured here: deleting and re-creating the 128 x 8 gang
until every pod is bound (BENCH_BASELINE_RUNS times). Its detection is Kubernetes' own per signal (stated,
not measured: a process exit at once; a NoExecute taint at once; a NotReady node after the node
controller's 40 s grace plus the pods' 300 s not-ready toleration; a GPU condition never, so the NCCL
watchdog's 600 s timeout), and every interruption, planned ones included, recomputes half a checkpoint
interval on average.

The main gang declares `checkpoint.saveOnFault` with TP8 x PP4 x DP32 (BENCH_SAVE_ON_FAULT=0: not): on an unplanned
fault the simulated survivors answer the operator's request with the step they completed, so the new attempt resumes
from it; which share of unplanned faults qualified is reported.

The projection: goodput = 1 - rate x cost per interruption, at Llama 3's rate scaled to 1,024 and 16,384
GPUs, for 5-, 10- and 30-minute checkpoint intervals; cost = detection (with the survivors' save) + re-bind + first
step (measured, per signal, weighted by the mix) + start-up (process start, rendezvous, checkpoint load, which kwok
cannot show: measured on the real node, docs/results/real-fault.json, the same on both sides; `projection_startup_120s`
repeats it at 120 s) + recompute (what was measured for planned faults and faults saved on; half an interval
otherwise, and always for the baseline).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import arguments, cluster, fresh_cluster, wait
from bench.launcher import OperatorProcess
from bench.rig.operator import apply_crds, gauge, scrape, settled
from railyard.operator.kube.client import ApiException, KubeApi
from railyard.worker import Reporter, context

NS = "bench-goodput"
LEASE_NS = "railyard-bench"
JOB = "goodput-main"
REPLICAS = int(os.environ.get("BENCH_REPLICAS", "128"))
FAULTS = int(os.environ.get("BENCH_FAULTS", "12"))
STEP_SECONDS = float(os.environ.get("BENCH_STEP_SECONDS", "0.5"))
CHECKPOINT_STEPS = int(os.environ.get("BENCH_CHECKPOINT_STEPS", "30"))
# Start-up (process start, rendezvous, checkpoint load) is what kwok cannot show: measured on the real node
# (tests/e2e/test_real_node.py's crash test, docs/results/real-fault.json: pod bound to the resumed first step) unless
# BENCH_STARTUP_SECONDS says otherwise; the projection also shows it at ASSUMED_STARTUP_SECONDS (a large model's load).
REAL_FAULT = Path(__file__).resolve().parents[3] / "docs" / "results" / "real-fault.json"
ASSUMED_STARTUP_SECONDS = 120.0
SAVE_ON_FAULT = os.environ.get("BENCH_SAVE_ON_FAULT", "1") == "1"
PARALLELISM = {"tensor": 8, "pipeline": 4}  # 128 x 8 GPUs: TP8 x PP4 x DP32
BASELINE_RUNS = int(os.environ.get("BENCH_BASELINE_RUNS", "3"))
BACKGROUND = int(os.environ.get("BENCH_BACKGROUND_JOBS", "24"))  # 16 x 8 each
# Soak (`make soak`): a fault every SOAK_EVERY seconds for SOAK_MINUTES, invariants after each.
SOAK_MINUTES = float(os.environ.get("BENCH_SOAK_MINUTES", "30" if "--soak" in sys.argv else "0"))
SOAK_EVERY = float(os.environ.get("BENCH_SOAK_EVERY_SECONDS", "60"))

# Llama 3 (Dubey et al. 2024, table 5): share of the 466 interruptions by the signal each maps onto.
MIX = {"gpu": 0.587, "exit": 0.146, "taint": 0.101, "maintenance": 0.076, "heartbeat": 0.090}
LLAMA3_PER_HOUR_AT_16K = 466 / (54 * 24)
# What Kubernetes alone does per signal (the baseline's detection; see the docstring).
BASELINE_DETECTION = {"gpu": 600.0, "exit": 0.0, "taint": 0.0, "maintenance": 0.0, "heartbeat": 340.0}
FAULT_CONDITION = "GpuMemWatch"  # one of topology/cluster/faults.DEFAULT_FAULT_CONDITIONS (NVSentinel's)


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


@dataclass
class Operator:
    name: str
    metrics_port: int
    report_port: int
    proc: OperatorProcess | None = None

    def start(self) -> None:
        self.proc = OperatorProcess(cluster.KUBECONFIG, LEASE_NS, cluster.STATE / "logs" / f"{self.name}.log", {
            "RAILYARD_REPORT_FLUSH_SECONDS": "1",
            # Every simulated rank reports from 127.0.0.1: the per-source limit is for real pod addresses.
            "RAILYARD_REPORT_SOURCE_RATE": "100000",
            # Time is compressed ~300x: the per-job storm brakes (meant for faults minutes apart, which
            # at Llama 3's rate a job never sees) would otherwise be what is measured.
            "RAILYARD_INFRA_BACKOFF_SECONDS": "0", "RAILYARD_INFRA_RESTARTS_PER_HOUR": "100000"},
            metrics_port=self.metrics_port, health_port=0, report_port=self.report_port)

    @property
    def report_url(self) -> str:
        return f"http://127.0.0.1:{self.report_port}/v1/reports"

    def is_leader(self) -> bool:
        return gauge(scrape(self.metrics_port), "railyard_is_leader") == 1

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.stop(kill=True)


@dataclass
class Rank:
    pod: str
    reporter: Reporter


@dataclass
class Driver:
    """The 128 simulated ranks of the current attempt."""

    api: KubeApi
    leader: Operator  # the reports Service sends ranks to the leader; here, the driver does
    tokens: Path
    step: int = 0
    best: int = 0
    attempt: int = -1
    ranks: list[Rank] = field(default_factory=list)
    halted: bool = False
    first_step_at: float | None = None
    resumed_from: int | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _pods(self) -> list[dict]:
        return self.api.request("GET", f"/api/v1/namespaces/{NS}/pods",
                                query=[("labelSelector", f"railyard.dev/job-name={JOB}")])["items"]

    def _token(self, pod: dict) -> Path:
        meta = pod["metadata"]
        answer = self.api.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/default/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": ["railyard.dev"], "expirationSeconds": 3600,
                     "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}}})
        path = self.tokens / meta["name"]
        path.write_text(answer["status"]["token"])
        return path

    def _adopt(self, attempt: int, pods: list[dict]) -> None:
        """A new attempt is running: reporters for its pods, from its resume step."""
        ordered = sorted(pods, key=lambda p: int(p["metadata"]["labels"]["railyard.dev/rank"]))
        with ThreadPoolExecutor(16) as pool:  # what the kubelets do in parallel: mount each pod's token
            tokens = list(pool.map(self._token, ordered))
        ranks = []
        for pod, token in zip(ordered, tokens, strict=True):
            env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}
            env["RAILYARD_REPORT_URL"] = self.leader.report_url
            env["RAILYARD_TOKEN_FILE"] = str(token)
            reporter = Reporter(context(env), min_interval=2.0, timeout=2.0)
            if SAVE_ON_FAULT:
                reporter.on_fault_save(self._save_on_fault)
            ranks.append(Rank(pod["metadata"]["name"], reporter))
        resume = ranks[0].reporter.ctx.resume_step if ranks else None
        with self.lock:
            old, self.ranks, self.attempt, self.halted = self.ranks, ranks, attempt, False
            self.resumed_from = resume
            self.step = resume if resume is not None else 0
            self.first_step_at = None
        for r in old:  # the old attempt's ranks are gone: their senders stop
            r.reporter.stale = True
            r.reporter.close(timeout=0.1)

    def _save_on_fault(self, local_ranks: list[int]) -> tuple[int, str]:
        """A survivor asked to save: the step the gang completed before it hung, as every saver sees it."""
        with self.lock:
            return self.step, f"/ckpt/fault-{self.step}"

    def watch_attempt(self) -> None:
        """Find the running attempt (the pods labelled with the job's newest restart count, all Running)."""
        status = self.api.request("GET", f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs/{JOB}").get(
            "status") or {}
        attempt = status.get("restartCount", 0)
        if attempt == self.attempt:
            return
        pods = [p for p in self._pods() if p["metadata"]["labels"].get("railyard.dev/restart-count") == str(attempt)
                and not p["metadata"].get("deletionTimestamp")]
        if len(pods) == REPLICAS and all(p["status"].get("phase") == "Running" for p in pods):
            self._adopt(attempt, pods)

    def follow(self, leader: Operator) -> None:
        self.leader = leader
        url = leader.report_url
        with self.lock:
            for r in self.ranks:
                r.reporter.ctx = dataclasses.replace(r.reporter.ctx, report_url=url)

    def run(self) -> None:
        next_tick = time.monotonic()
        while not self.stop.is_set():
            try:
                self.watch_attempt()
            except (ApiException, OSError) as e:
                log(f"driver: {e}")
            with self.lock:
                ranks = list(self.ranks) if not self.halted else []
                held = bool(ranks) and any(r.reporter.holding(self.step) for r in ranks)
                if held:  # saved the step the operator asked for: hold (Reporter.hold), keep reporting
                    for r in ranks:
                        r.reporter.progress(self.step)
                    ranks = []
                if ranks:
                    self.step += 1
                    self.best = max(self.best, self.step)
                    step = self.step
            if ranks:
                asked = any(r.reporter.checkpoint_requested(step) for r in ranks)
                for r in ranks:
                    r.reporter.progress(step, STEP_SECONDS * 0.9, STEP_SECONDS)
                    if step % CHECKPOINT_STEPS == 0 or asked:
                        r.reporter.checkpoint_saved(step, f"/ckpt/step-{step}")
                if self.first_step_at is None and all(r.reporter.sent for r in ranks):
                    self.first_step_at = time.monotonic()
            next_tick += STEP_SECONDS
            time.sleep(max(0.0, next_tick - time.monotonic()))


def _job(name: str, replicas: int, checkpoint: bool) -> dict:
    spec: dict[str, Any] = {"replicas": replicas, "template": {"spec": {"containers": [
        {"name": "trainer", "image": "registry.invalid/trainer:0", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}
    if checkpoint:
        spec["checkpoint"] = {"path": "/ckpt", "intervalSeconds": int(CHECKPOINT_STEPS * STEP_SECONDS),
                              "saveOnFault": SAVE_ON_FAULT}
        spec["parallelism"] = PARALLELISM
        # What a process failure waits at the real rate (attempts run > 10 min, so the backoff resets).
        spec["faultPolicy"] = {"maxRestarts": 1000, "restartBackoff": {"initialSeconds": 10, "maxSeconds": 10}}
    return {"apiVersion": "railyard.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


def _status(api: KubeApi) -> dict:
    return api.request("GET", f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs/{JOB}").get("status") or {}


def _all_bound(api: KubeApi, name: str, attempt: int | None = None) -> bool:
    pods = api.request("GET", f"/api/v1/namespaces/{NS}/pods",
                       query=[("labelSelector", f"railyard.dev/job-name={name}")])["items"]
    pods = [p for p in pods if not p["metadata"].get("deletionTimestamp") and (
        attempt is None or p["metadata"]["labels"].get("railyard.dev/restart-count") == str(attempt))]
    return len(pods) == REPLICAS and all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                                         for p in pods)


def _node_of_rank(api: KubeApi, rank: int) -> tuple[str, str]:
    ranks = _status(api)["placement"]["ranks"]
    r = next(x for x in ranks if x["rank"] == rank)
    return r["node"], r.get("pod") or ""


def _merge(api: KubeApi, path: str, body: dict) -> None:
    api.request("PATCH", path, body, "application/merge-patch+json")


def inject(api: KubeApi, kind: str, rank: int) -> str:
    node, pod = _node_of_rank(api, rank)
    if kind == "gpu":
        api.request("PATCH", f"/api/v1/nodes/{node}/status", {"status": {"conditions": [
            {"type": FAULT_CONDITION, "status": "True", "reason": "XID79", "message": "GPU has fallen off the bus",
             "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}},
            "application/strategic-merge-patch+json")
    elif kind == "exit":
        _merge(api, f"/api/v1/namespaces/{NS}/pods/{pod}",
               {"metadata": {"annotations": {"railyard.dev/simulate": "fail"}}})
    elif kind == "taint":
        taints = (api.request("GET", f"/api/v1/nodes/{node}")["spec"].get("taints") or [])
        _merge(api, f"/api/v1/nodes/{node}", {"spec": {"taints": [
            *taints, {"key": "example.com/nic-down", "value": "rail3", "effect": "NoExecute"}]}})
    elif kind == "maintenance":
        _merge(api, f"/api/v1/nodes/{node}", {"metadata": {"annotations": {"railyard.dev/maintenance": "bench"}}})
    elif kind == "heartbeat":
        _merge(api, f"/api/v1/nodes/{node}", {"metadata": {"labels": {"type": None}}})
    return node


def schedule(count: int) -> list[str]:
    """`count` faults in MIX proportions (largest remainder), interleaved."""
    exact = {k: v * count for k, v in MIX.items()}
    counts = {k: int(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - counts[k], reverse=True)[:count - sum(counts.values())]:
        counts[k] += 1
    out: list[str] = []
    while any(counts.values()):
        for k in MIX:
            if counts[k]:
                out.append(k)
                counts[k] -= 1
    return out


def one_fault(api: KubeApi, driver: Driver, kind: str, rank: int, before_kill: float | None = None) -> dict:
    attempt = driver.attempt
    t0 = time.monotonic() if before_kill is None else before_kill
    with driver.lock:
        reached = driver.step
        if kind != "maintenance":  # the gang hangs on a lost rank; a planned move lets it train on
            driver.halted = True
    node = inject(api, kind, rank)
    wait(lambda: _status(api).get("restartCount", 0) > attempt, 600, f"the restart after {kind}", interval=0.2)
    decided = time.monotonic()
    with driver.lock:
        reached = max(reached, driver.step)
        driver.halted = True
    status = _status(api)
    new = status.get("restartCount", 0)
    wait(lambda: _all_bound(api, JOB, new), 600, f"attempt {new} bound", interval=0.2)
    bound = time.monotonic()
    wait(lambda: driver.attempt == new and driver.first_step_at is not None, 120, f"attempt {new}'s first step",
         interval=0.1)
    first = driver.first_step_at or time.monotonic()
    resumed = driver.resumed_from or 0
    restart = status.get("lastRestart") or {}
    record = {"fault": kind, "node": node, "reason": restart.get("reason"), "detect_seconds": round(decided - t0, 2),
              "bind_seconds": round(bound - decided, 2), "first_step_seconds": round(first - bound, 2),
              "total_seconds": round(first - t0, 2), "steps_recomputed": max(0, reached - resumed),
              "resume_step": resumed, "step_reached": reached,
              "save_on_fault": (restart.get("saveOnFault") or {}).get("outcome")}
    log(json.dumps(record))
    return record


def baseline_recreate(api: KubeApi) -> float:
    """JobSet-style recovery: the whole gang deleted, then created again (placed anywhere), until bound."""
    name = "goodput-baseline"
    api.request("POST", f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs", _job(name, REPLICAS, False))
    wait(lambda: _all_bound(api, name), 600, "baseline gang bound", interval=0.2)
    t0 = time.monotonic()
    api.request("DELETE", f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs/{name}",
                {"propagationPolicy": "Foreground"})

    def gone() -> bool:
        try:
            api.request("GET", f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs/{name}")
            return False
        except ApiException as e:
            return e.status == 404

    wait(gone, 600, "baseline gang deleted", interval=0.2)
    api.request("POST", f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs", _job(name, REPLICAS, False))
    wait(lambda: _all_bound(api, name), 600, "baseline gang bound again", interval=0.2)
    seconds = time.monotonic() - t0
    api.request("DELETE", f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs/{name}")
    wait(gone, 600, "baseline gang deleted", interval=0.2)
    return seconds


def startup_seconds() -> tuple[float, str]:
    """The start-up figure and where it comes from."""
    if os.environ.get("BENCH_STARTUP_SECONDS"):
        return float(os.environ["BENCH_STARTUP_SECONDS"]), "BENCH_STARTUP_SECONDS"
    measured = json.loads(REAL_FAULT.read_text())["with"]["bound_to_first_step_seconds"]
    return float(measured), f"measured on the real node ({REAL_FAULT.name}: bound to the resumed first step)"


def project(records: list[dict], recreate: float, gpus: int, interval_min: float, startup: float) -> dict:
    """Goodput = 1 - rate x cost, at Llama 3's interruption rate scaled to `gpus`. An unplanned fault recomputes
    half a checkpoint interval on average, unless its survivors saved on the fault (what was measured then)."""
    rate = LLAMA3_PER_HOUR_AT_16K * gpus / 16384  # interruptions per hour
    interval = interval_min * 60
    by_kind: dict[str, list[dict]] = {}
    for r in records:
        by_kind.setdefault(r["fault"], []).append(r)
    railyard = baseline = 0.0
    for kind, share in MIX.items():
        measured = by_kind.get(kind) or by_kind["gpu"]
        planned = kind == "maintenance"
        # A planned move trains on until the step it saves: only re-binding and the first step are lost.
        cost = statistics.mean(r["total_seconds"] - (r["detect_seconds"] if planned else 0) for r in measured)
        cost += startup
        cost += statistics.mean(r["steps_recomputed"] * STEP_SECONDS if planned or r.get("save_on_fault") == "Saved"
                                else interval / 2 for r in measured)
        railyard += share * cost
        baseline += share * (BASELINE_DETECTION[kind] + recreate + startup + interval / 2)
    return {"gpus": gpus, "checkpoint_minutes": interval_min, "startup_seconds": startup,
            "interruptions_per_day": round(rate * 24, 2),
            "railyard_seconds_per_interruption": round(railyard, 1),
            "baseline_seconds_per_interruption": round(baseline, 1),
            "railyard_goodput": round(1 - rate * railyard / 3600, 4),
            "baseline_goodput": round(1 - rate * baseline / 3600, 4),
            "lost_time_ratio": round(railyard / baseline, 3)}


def invariants(api: KubeApi) -> dict:
    """0 GPUs double-booked, 0 partial gangs (some but not all of an attempt's pods bound), and which
    jobs other than the main gang restarted (none should: no fault touched them)."""
    pods = [p for p in api.list_all(f"/api/v1/namespaces/{NS}/pods") if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") not in ("Succeeded", "Failed")]
    held: dict[tuple[str, int], int] = {}
    for p in pods:
        node = p["spec"].get("nodeName")
        for gpu in (p["metadata"].get("annotations") or {}).get("railyard.dev/gpus", "").split(","):
            if node and gpu.strip():
                held[(node, int(gpu))] = held.get((node, int(gpu)), 0) + 1
    partial = []
    jobs = api.list_all(f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs")
    for job in jobs:
        attempt = str((job.get("status") or {}).get("restartCount", 0))
        mine = [p for p in pods if p["metadata"]["labels"].get("railyard.dev/job-name") == job["metadata"]["name"]
                and p["metadata"]["labels"].get("railyard.dev/restart-count") == attempt]
        bound = sum(1 for p in mine if p["spec"].get("nodeName"))
        if 0 < bound < job["spec"]["replicas"]:
            partial.append(job["metadata"]["name"])
    restarted = [j["metadata"]["name"] for j in jobs
                 if j["metadata"]["name"] != JOB and (j.get("status") or {}).get("restartCount", 0)]
    return {"gpus_double_booked": sum(1 for n in held.values() if n > 1), "partial_gangs": partial,
            "other_jobs_restarted": restarted}


def kill_leader(operators: list[Operator], driver: Driver) -> tuple[Operator, float]:
    """SIGKILL the Lease holder; the ranks report to the standby, which takes over. (killed, when)."""
    leader = next(op for op in operators if op.is_leader())
    killed = time.monotonic()
    leader.kill()
    driver.follow(next(op for op in operators if op is not leader))
    return leader, killed


def soak(api: KubeApi, driver: Driver, operators: list[Operator], minutes: float, every: float) -> dict:
    """A fault every `every` seconds for `minutes` (the mix in turn, every 10th a leader kill first);
    the invariants after each recovery."""
    end = time.monotonic() + minutes * 60
    kinds = schedule(max(1, int(minutes * 60 / every)))
    records, violations = [], []
    for i, kind in enumerate(kinds):
        if time.monotonic() >= end:
            break
        started = time.monotonic()
        killed = kill_leader(operators, driver) if i % 10 == 9 else None
        records.append(one_fault(api, driver, kind, (i * 37 + 5) % REPLICAS,
                                 before_kill=killed[1] if killed else None))
        if killed:
            killed[0].start()
        found = invariants(api)
        if found["gpus_double_booked"] or found["partial_gangs"] or found["other_jobs_restarted"]:
            violations.append({"after_fault": i, **found})
        time.sleep(max(0.0, every - (time.monotonic() - started)))
    return {"minutes": minutes, "faults": len(records), "recovered": len(records), "violations": violations,
            "mean_recovery_seconds": round(statistics.mean(r["total_seconds"] for r in records), 1)
            if records else None,
            "final": invariants(api)}


def main() -> None:
    arguments(__doc__, {"--soak": "a fault a minute for BENCH_SOAK_MINUTES (30), invariants after each"})
    figures: dict[str, Any] = {"rig": fresh_cluster("superpod-2k", started_by="bench goodput")}
    api = KubeApi(workers=16)
    wait(lambda: settled(api), 300, "nodes settled", interval=1)
    for ns in (NS, LEASE_NS):
        api.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    apply_crds()
    operators = [Operator("goodput-a", 18081, 18091), Operator("goodput-b", 18082, 18092)]
    for op in operators:
        op.start()
    wait(lambda: any(op.is_leader() for op in operators), 90, "a leader")
    t0 = time.monotonic()
    api.request("POST", f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs", _job(JOB, REPLICAS, True))
    for i in range(BACKGROUND):
        api.request("POST", f"/apis/railyard.dev/v1alpha1/namespaces/{NS}/trainingjobs", _job(f"bg-{i}", 16, False))
    wait(lambda: _all_bound(api, JOB), 600, "the 128 x 8 gang bound", interval=0.5)
    figures["gang_bound_seconds"] = round(time.monotonic() - t0, 1)
    with tempfile.TemporaryDirectory() as tokens:
        driver = Driver(api, next(op for op in operators if op.is_leader()), Path(tokens))
        thread = threading.Thread(target=driver.run, daemon=True)
        thread.start()
        wait(lambda: driver.first_step_at is not None, 120, "the ranks reporting", interval=0.2)
        if SOAK_MINUTES:
            figures["soak"] = soak(api, driver, operators, SOAK_MINUTES, SOAK_EVERY)
            driver.stop.set()
            for op in operators:
                op.kill()
            print(json.dumps(figures, indent=2))
            if not os.environ.get("BENCH_KEEP_RIG"):
                cluster.down()
            sys.exit(1 if figures["soak"]["violations"] else 0)
        records = []
        for i, kind in enumerate(schedule(FAULTS)):
            # The gang trains between faults, past at least one periodic checkpoint.
            time.sleep(CHECKPOINT_STEPS * STEP_SECONDS * 1.5)
            records.append(one_fault(api, driver, kind, (i * 37) % REPLICAS))
        for i in range(2):  # leader kills: the standby handles the next fault
            time.sleep(CHECKPOINT_STEPS * STEP_SECONDS * 1.5)
            leader, killed = kill_leader(operators, driver)
            record = one_fault(api, driver, "gpu", (i * 53 + 11) % REPLICAS, before_kill=killed)
            record["after_leader_kill"] = True
            records.append(record)
            leader.start()
        status = _status(api)
        driver.stop.set()
        thread.join(10)
    figures["faults"] = records
    figures["operator_goodput_status"] = status.get("goodput")
    recreate = [baseline_recreate(api) for _ in range(BASELINE_RUNS)]
    figures["baseline_recreate_seconds"] = [round(s, 1) for s in recreate]
    by_kind: dict[str, list[float]] = {}
    for r in records:
        by_kind.setdefault(r["fault"], []).append(r["total_seconds"])
    figures["railyard_seconds_by_signal"] = {k: round(statistics.mean(v), 1) for k, v in by_kind.items()}
    figures["planned_steps_recomputed"] = [r["steps_recomputed"] for r in records if r["fault"] == "maintenance"]
    unplanned = [r for r in records if r["fault"] != "maintenance"]
    saved = [r for r in unplanned if r.get("save_on_fault") == "Saved"]
    figures["save_on_fault"] = {
        "enabled": SAVE_ON_FAULT, "parallelism": PARALLELISM, "unplanned_faults": len(unplanned),
        "saved": len(saved), "share_saved": round(len(saved) / len(unplanned), 3) if unplanned else None,
        "steps_recomputed_when_saved": [r["steps_recomputed"] for r in saved],
        "outcomes": sorted({str(r.get("save_on_fault")) for r in unplanned})}
    startup, source = startup_seconds()
    figures["assumptions"] = {"startup_seconds": startup, "startup_source": source,
                              "baseline_detection_seconds": BASELINE_DETECTION,
                              "mix": MIX, "interruptions_per_hour_at_16384_gpus": round(LLAMA3_PER_HOUR_AT_16K, 3)}
    figures["projection"] = [project(records, statistics.mean(recreate), g, m, startup)
                             for g in (1024, 16384) for m in (5, 10, 30)]
    # The same with a large model's start-up (what a 2-process example cannot show), on both sides.
    figures["projection_startup_120s"] = [project(records, statistics.mean(recreate), g, m, ASSUMED_STARTUP_SECONDS)
                                          for g in (1024, 16384) for m in (5, 10, 30)]
    for op in operators:
        op.kill()
    print(json.dumps(figures, indent=2))
    if not os.environ.get("BENCH_KEEP_RIG"):
        cluster.down()


if __name__ == "__main__":
    main()
