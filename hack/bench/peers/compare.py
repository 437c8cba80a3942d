#!/usr/bin/env python3
"""`make compare`: Railyard side by side with kube-scheduler 1.36's gang scheduling (PodGroup with a
topology key), Kueue's Topology Aware Scheduling, Volcano's network-topology-aware scheduling and
a naive podAffinity baseline, each on a fresh
superpod-2k rig (2,048 kwok nodes x 8 GPUs), one peer at a time, with the same job stream submitted
as one burst (about 1.3x the GPUs there are). Placements are read from the bound pods
(hack/bench/peers/translators.py). Prints JSON; writes the Markdown table to $COMPARE_OUT (default:
compare.md in the rig's state directory).

Kueue TAS (v0.19.2) and Volcano (v1.14.1: vc-scheduler and vc-controller-manager), built on first
use by hack/build-binaries.sh kueue|volcano, run as processes next to the rig. Restarts the local
rig once per peer.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import bench.peers.kueue as peers_kueue
import bench.peers.volcano as peers_volcano
from bench.common import after_gc_discovery, arguments, cluster, fresh_cluster, percentile, wait
from bench.controllers import workload_controller
from bench.peers.translators import (
    JOB_LABEL,
    PEERS,
    TRANSLATORS,
    markdown_table,
    on_common_jobs,
    read_placements,
    stream,
    summarise,
)
from bench.rig.operator import (
    NS,
    PodWatch,
    apply_crds,
    cpu_seconds,
    gauge,
    histogram_quantile,
    scrape,
    settled,
    start_operator,
)
from railyard.operator.kube.client import KubeApi

JOBS = int(os.environ.get("COMPARE_JOBS", "150"))
SEED = int(os.environ.get("COMPARE_SEED", "11"))
QUIET_SECONDS = float(os.environ.get("COMPARE_QUIET_SECONDS", "30"))
MAX_SECONDS = float(os.environ.get("COMPARE_MAX_SECONDS", "600"))
SELECTED = [p for p in os.environ.get("COMPARE_PEERS", ",".join(PEERS)).split(",") if p]
RECORD = Path(os.environ["COMPARE_RECORD"]) if os.environ.get("COMPARE_RECORD") else None
_PATHS = {("railyard.dev/v1alpha1", "TrainingJob"): "/apis/railyard.dev/v1alpha1/namespaces/{ns}/trainingjobs",
          ("v1", "Pod"): "/api/v1/namespaces/{ns}/pods",
          ("batch/v1", "Job"): "/apis/batch/v1/namespaces/{ns}/jobs",
          ("batch.volcano.sh/v1alpha1", "Job"): "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs",
          ("scheduling.k8s.io/v1alpha2", "PodGroup"): "/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups",
          ("jobset.x-k8s.io/v1alpha2", "JobSet"): "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"}
_SCHEDULERS = ("kube-scheduler", "railyard-operator", "kueue", "vc-scheduler", "vc-controller-manager")
RAILYARD = ("railyard", "railyard-jobset")  # the second: the same jobs as JobSets Railyard places (issue 46)
OPERATOR_METRICS = 18080  # bench/rig/operator.start_operator's


class _Controller:
    """A workload controller (bench/controllers.py) in `processes`: stopped as the peers' schedulers are."""

    def __init__(self, name: str) -> None:
        self.stack = contextlib.ExitStack()
        self.stack.enter_context(workload_controller(name, Path(tempfile.mkdtemp(prefix=f"compare-{name}-"))))
        self.pid = 0

    def terminate(self) -> None:
        self.stack.close()

    def wait(self, timeout: float) -> None:
        return None


def start_peer(peer: str) -> tuple[dict, KubeApi, list, dict[str, int]]:
    """A fresh superpod-2k rig with the peer's scheduler running: (rig figures, API, the peer's
    processes, their pids by name for the CPU figures)."""
    # kwok completes Job-owned pods by default; here pods run until the end, or for the lifetime
    # they ask (the living cluster).
    # Kubernetes' node-monitor defaults: with the fault tests' 20 s grace, kwok's lease renewals lag past
    # it on a loaded 2-core machine and kube-controller-manager marks, then evicts, pods of healthy nodes
    # (a Kueue run lost a third of its utilisation to that: PUT pods/status 0.83 and DELETE pods 0.43 a pod).
    figures: dict = fresh_cluster("superpod-2k", "workload" if peer == "kube-scheduler-gang" else None,
                                  keep_job_pods=True, started_by="make compare", upstream_lifecycle=True)
    api = KubeApi(workers=32)
    wait(lambda: settled(api), 300, "nodes without not-ready taints", interval=1)
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    extra: dict[str, int] = {}
    processes: list[Any] = []  # what stop() ends: the peers' processes, a workload controller
    crds_applied = time.monotonic()  # Volcano's, in peers_volcano.start
    if peer == "railyard-jobset":
        processes.append(_Controller("jobset"))
    if peer in RAILYARD:
        crds_applied = apply_crds()
        operator, port, _ = start_operator("railyard-compare")
        processes.append(operator.proc)
        wait(lambda: gauge(scrape(port), "railyard_state_synced") == 1, 60, "state synced")
        extra["railyard-operator"] = operator.pid
    if peer == "kueue-tas":
        kueue = peers_kueue.start(api, NS, cluster_gpus(api))
        processes.append(kueue)
        extra["kueue"] = kueue.pid
    if peer == "volcano":
        for proc, name in zip(peers_volcano.start(api, api.list_all("/api/v1/nodes")),
                              ("vc-scheduler", "vc-controller-manager"), strict=True):
            processes.append(proc)
            extra[name] = proc.pid
    if peer in (*RAILYARD, "volcano"):  # their pods are owned by objects of a kind installed just now
        after_gc_discovery(crds_applied)
    return figures, api, processes, extra


def operator_requests() -> float:
    """API requests the operator has sent so far (its own counter, every verb and resource)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in scrape(OPERATOR_METRICS).splitlines()
               if line.startswith("railyard_api_requests_total{"))


def cluster_gpus(api: KubeApi) -> int:
    return sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in api.list_all("/api/v1/nodes"))


def submitter(api: KubeApi, peer: str):
    """A function that submits one job as the peer's objects."""
    def submit(job) -> None:
        for obj in TRANSLATORS[peer](job):
            api.request("POST", _PATHS[(obj["apiVersion"], obj["kind"])].format(ns=NS), obj)
    return submit


def scheduler_cpu(before: dict[str, float], after: dict[str, float]) -> float:
    return round(sum(after[k] - before[k] for k in after if k in _SCHEDULERS), 1)


def stop(processes: list) -> None:
    for proc in processes:
        proc.terminate()
        proc.wait(30)


def run_peer(peer: str, jobs) -> tuple[dict, dict]:
    figures, api, processes, extra = start_peer(peer)
    watcher = PodWatch()
    cpu_before = cpu_seconds(extra)
    requests_before = operator_requests() if peer in RAILYARD else 0.0
    submitted: dict[str, float] = {}
    send = submitter(api, peer)

    def submit(job) -> None:
        submitted[job.name] = time.monotonic()
        send(job)

    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(submit, jobs))
    last, seen = time.monotonic(), 0
    while time.monotonic() - t0 < MAX_SECONDS and time.monotonic() - last < QUIET_SECONDS:
        time.sleep(1)
        if len(watcher.bound) != seen:
            seen, last = len(watcher.bound), time.monotonic()
    cpu_after = cpu_seconds(extra)
    watcher.stop()
    pods = api.list_all(f"/api/v1/namespaces/{NS}/pods")
    nodes = api.list_all("/api/v1/nodes")
    if RECORD:  # the raw material of the reader, for its CI test
        RECORD.mkdir(parents=True, exist_ok=True)
        (RECORD / f"{peer}.json").write_text(json.dumps({"pods": pods, "nodes": nodes}))
    placements = read_placements(jobs, pods, nodes)
    figures.update(summarise(placements))
    # Submit -> every replica bound, for the jobs that were.
    done = _last(watcher.bound, watcher)
    latencies = [done[j.name] - submitted[j.name] for j in jobs
                 if j.name in done and placements[j.name]["bound"] == j.replicas]
    released_at = _last(watcher.released, watcher)
    if peer == "railyard-jobset":  # from the gang's last pod made by the Job controller (Railyard's share)
        made = _last(watcher.created, watcher)
        ready = [done[j.name] - made[j.name] for j in jobs
                 if j.name in done and j.name in made and placements[j.name]["bound"] == j.replicas]
        figures["gang_made_to_bound_p50_seconds"] = percentile(ready, 50) if ready else None
        figures["gang_made_to_bound_p99_seconds"] = percentile(ready, 99) if ready else None
        placed = [released_at[j.name] - made[j.name] for j in jobs if j.name in made and j.name in released_at]
        figures["gang_made_to_released_p50_seconds"] = percentile(placed, 50) if placed else None
        figures["pods_made_per_second"] = round(len(watcher.created) / (max(watcher.created.values()) - t0), 1) \
            if watcher.created else 0
    bound_times = list(watcher.bound.values())
    gpus_of = {j.name: j.gpus for j in jobs}
    # GPUs bound over time since the burst, one point a second (for the plot).
    running, step = 0, 0.0
    timeline: list[tuple[float, int]] = []
    for at, pod in sorted((at, pod) for pod, at in watcher.bound.items()):
        running += gpus_of.get(watcher.labels.get(pod, {}).get(JOB_LABEL, ""), 0)
        if at - t0 >= step or not timeline:
            timeline.append((round(at - t0, 1), running))
            step = at - t0 + 1
    if bound_times:
        timeline.append((round(max(bound_times) - t0, 1), running))
    figures["gpus_bound_over_time"] = timeline
    figures["tors_per_job"] = sorted(p["tors"] for p in placements.values()
                                     if p["bound"] == p["replicas"] and p["replicas"] > 1)
    figures["latencies_seconds"] = sorted(round(x, 2) for x in latencies)
    # Per job (replicas, submitted, last replica bound, since the burst): which jobs make the tail.
    figures["job_times"] = {j.name: [j.replicas, round(submitted[j.name] - t0, 2),
                                     round(done[j.name] - t0, 2) if j.name in done else None] for j in jobs}
    figures["bound_p50_seconds"] = percentile(latencies, 50) if latencies else None
    figures["bound_p99_seconds"] = percentile(latencies, 99) if latencies else None
    figures["pods_bound"] = len(bound_times)
    figures["pods_bound_per_second"] = round(len(bound_times) / (max(bound_times) - t0), 1) if bound_times else 0
    figures["scheduler_cpu_seconds"] = scheduler_cpu(cpu_before, cpu_after)
    figures["cpu_seconds"] = {k: round(cpu_after[k] - cpu_before[k], 1) for k in cpu_after}
    if peer in RAILYARD and bound_times:
        binding = [done[j.name] - released_at[j.name] for j in jobs if j.name in done and j.name in released_at]
        figures["released_to_bound_p50_seconds"] = percentile(binding, 50) if binding else None
        text = scrape(OPERATOR_METRICS)  # TrainingJob created (an adopted gang's: when its pods were all there)
        figures["created_to_released_p50_seconds"] = histogram_quantile(text, "railyard_job_release_seconds", 0.5)
        figures["created_to_released_p99_seconds"] = histogram_quantile(text, "railyard_job_release_seconds", 0.99)
        figures["operator_requests_per_pod"] = round((operator_requests() - requests_before) / len(bound_times), 3)
        figures["operator_cpu_ms_per_pod"] = round(
            1000 * figures["cpu_seconds"].get("railyard-operator", 0.0) / len(bound_times), 2)
    stop(processes)
    return figures, placements


def _last(times: dict[str, float], watcher: PodWatch) -> dict[str, float]:
    """Per job, when the last of its pods got there (`times`: one of the watcher's maps)."""
    last: dict[str, float] = {}
    for pod, at in times.items():
        if job := watcher.labels.get(pod, {}).get(JOB_LABEL):
            last[job] = max(last.get(job, 0.0), at)
    return last


def plot(out: dict, target: Path) -> None:
    """GPUs bound over time, TORs spanned per job, submit -> bound latency (CDF), per peer."""
    import matplotlib  # type: ignore[import-not-found]  # `make compare` installs it (.[compare])

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found]

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for peer, figures in out["peers"].items():
        times = figures["gpus_bound_over_time"]
        axes[0].step([t for t, _ in times], [g for _, g in times], where="post", label=peer)
        tors = figures["tors_per_job"]
        axes[1].plot(range(1, len(tors) + 1), tors, drawstyle="steps-post", label=peer)
        latencies = figures["latencies_seconds"]
        axes[2].step(latencies, [(i + 1) / len(latencies) for i in range(len(latencies))], where="post",
                     label=peer)
    axes[0].set(title=f"GPUs bound ({out['gpus_asked']:,} asked)", xlabel="seconds since the burst", ylabel="GPUs")
    axes[1].set(title="TORs spanned per gang placed whole (sorted)", xlabel="jobs", ylabel="TORs", yscale="log")
    axes[2].set(title="submit -> every replica bound", xlabel="seconds", ylabel="fraction of jobs placed")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(target, dpi=90)


def main() -> None:
    """COMPARE_MODE: burst (the one burst below), living (compare_living.py) or both (the default),
    each peer on a fresh rig per mode."""
    arguments(__doc__)
    mode = os.environ.get("COMPARE_MODE", "both")
    if mode not in ("burst", "living", "both"):
        raise SystemExit(f"COMPARE_MODE={mode!r}: expected burst, living or both")
    try:
        results = {}
        if mode in ("burst", "both"):
            results["burst"] = burst()
        if mode in ("living", "both"):
            import bench.peers.compare_living as compare_living  # imported here: it imports this module

            results["living"] = compare_living.main()
    finally:
        # The 2,048-node rig full of the last peer's pods is of no use to anything after: stop it.
        if not os.environ.get("COMPARE_KEEP_RIG"):
            cluster.down()
    print(json.dumps(results, indent=2))


def burst() -> dict:
    jobs = stream(JOBS, SEED)
    out: dict[str, Any] = {"jobs": len(jobs), "gpus_asked": sum(j.replicas * j.gpus for j in jobs),
           "pods_asked": sum(j.replicas for j in jobs), "cluster": "superpod-2k (2,048 nodes x 8 GPUs)", "peers": {}}
    placements = {}
    for peer in SELECTED:
        t0 = time.monotonic()
        out["peers"][peer], placements[peer] = run_peer(peer, jobs)
        out["peers"][peer]["run_seconds"] = round(time.monotonic() - t0, 1)
        brief = {k: v for k, v in out["peers"][peer].items() if k != "job_times"}
        print(f"# {peer}: {json.dumps(brief)}", flush=True)
    out["common_jobs"] = on_common_jobs(jobs, placements)
    target = Path(os.environ.get("COMPARE_OUT", str(cluster.STATE / "compare.md")))
    target.write_text(markdown_table(out["peers"]) + "\n")
    if os.environ.get("COMPARE_PLOT"):
        plot(out, Path(os.environ["COMPARE_PLOT"]))
    return out


if __name__ == "__main__":
    main()
