#!/usr/bin/env python3
"""The operator live at 98k GPUs: superpod-12k (12,288 kwok nodes x 8 GPUs) on a fresh rig. Prints JSON.

1. empty cluster: component RSS, a fresh operator's start-to-synced and RSS, 128 x 8 (twice) and
   1,024 x 8 creation-to-all-bound, the placement iteration's p50/p99 (the operator's histogram);
2. with BENCH_BACKGROUND_PODS (default 100,000) bound background pods added: the same for a fresh
   operator, with three 128 x 8 gangs, a 1,024 x 8 one and a 1,024 x 8 one with `restartStrategy: InPlace`;
   then one node lost (a NoExecute taint) until every rank of the gang's next attempt is bound: of the InPlace
   gang with the operator warm, of the InPlace gang with an operator started at the signal (its list of
   every pod inside the figure; BENCH_FRESH_RUNS times, default 3, each run kept and their median), of the
   Recreate gang (every pod made again) with that operator warm.
Restarts the local rig. The scale rig has a slow node lifecycle (hack/cluster.py SCALE_NODES).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import bench.rig.operator as ops
from bench.common import arguments, cluster, emit, fresh_cluster, rss_mib, wait
from bench.launcher import OperatorProcess
from bench.rig.recovery import lose_nodes_and_recover, set_taint
from railyard.operator.kube.client import KubeApi
from railyard.topology.cluster.labels import LABEL_TOR

BACKGROUND_PODS = int(os.environ.get("BENCH_BACKGROUND_PODS", "100000"))
FRESH_RUNS = int(os.environ.get("BENCH_FRESH_RUNS", "3"))


def component_rss(names: tuple[str, ...] = ("kube-apiserver", "etcd", "kwok", "kube-scheduler",
                                            "kube-controller-manager")) -> dict[str, float]:
    return {c: rss_mib(int((cluster.STATE / "pids" / f"{c}.pid").read_text())) for c in names}


def node_tors(api: KubeApi) -> dict[str, str]:
    return {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(LABEL_TOR, "")
            for n in api.list_all("/api/v1/nodes")}


def with_operator(api: KubeApi, name: str, gangs: tuple[int, ...], recover: bool = False) -> dict:
    """A fresh operator: start to synced, each gang created and bound in turn; with `recover`, an InPlace gang
    more of the last gang's size, and one node lost three times (bench_recovery.lose_nodes_and_recover): of the
    InPlace gang with the warm operator, of the InPlace gang with an operator started at the signal, then of the
    last (Recreate) gang with that operator warm."""
    t0 = time.monotonic()
    proc, port, _ = ops.start_operator(name, reports=recover)
    out: dict = {}
    try:
        wait(lambda: ops.gauge(ops.scrape(port), "railyard_state_synced") == 1, 900, "synced", interval=0.5)
        out["operator_start_to_synced_seconds"] = round(time.monotonic() - t0, 1)
        out["operator_rss_mib_synced"] = rss_mib(proc.pid)
        watcher = ops.PodWatch()
        tors = node_tors(api)
        bound = []
        sizes = [(size, False) for size in gangs] + ([(gangs[-1], True)] if recover else [])
        for run, (size, in_place) in enumerate(sizes):
            job = f"{name}-{run}"
            t0 = time.monotonic()
            api.request("POST", ops.JOBS, ops.training_job(job, size, in_place=in_place))
            mine = [f"{job}-{r}" for r in range(size)]
            wait(lambda m=mine: all(p in watcher.bound for p in m), 900, f"{job} bound", interval=0.1)
            bound.append({"replicas": size, "seconds": round(max(watcher.bound[p] for p in mine) - t0, 2),
                          "tors": len({tors.get(watcher.node[p]) for p in mine}), "in_place": in_place})
            ops.progress(bound[-1])
        out["create_to_all_bound"] = bound
        ops.progress({"operator_start_to_synced_seconds": out["operator_start_to_synced_seconds"],
                      "operator_rss_mib_synced": out["operator_rss_mib_synced"],
                      "operator_rss_mib_now": rss_mib(proc.pid)})
        if recover:
            proc, port = _recoveries(api, watcher, name, len(sizes), gangs[-1], proc, out)
        watcher.stop()
        out["operator_peak_rss_mib"] = rss_mib(proc.pid, "VmHWM")
        text = ops.scrape(port)
        iterations = ops.gauge(text, "railyard_placement_iteration_seconds_count")
        out["iterations"] = int(iterations)
        out["iteration_seconds_mean"] = round(
            ops.gauge(text, "railyard_placement_iteration_seconds_sum") / max(1.0, iterations), 4)
        out["iteration_seconds_le"] = {
            "p50": ops.histogram_quantile(text, "railyard_placement_iteration_seconds", 0.5),
            "p99": ops.histogram_quantile(text, "railyard_placement_iteration_seconds", 0.99)}
    finally:
        proc.stop(timeout=60)
    return out


def median_or_none(values: list[float | None]) -> float | None:
    """The median, or None when a run did not recover within its timeout (a failed run is not averaged away)."""
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known and len(known) == len(values) else None


def _recoveries(api: KubeApi, watcher: ops.PodWatch, name: str, count: int, replicas: int, proc: OperatorProcess,
                out: dict) -> tuple[OperatorProcess, int]:
    """The three node losses of `with_operator(recover=True)`; the operator running at the end and its metrics port."""
    in_place, recreate = f"{name}-{count - 1}", f"{name}-{count - 2}"

    def lose(key: str, job: str, before_signal: Callable[[], None] | None = None, timeout: float = 300) -> None:
        out[key] = lose_nodes_and_recover(api, watcher, job, replicas, 1, bound_timeout=timeout,
                                          before_signal=before_signal)
        ops.progress({key: out[key]})
        for node in out[key]["victims"]:
            set_taint(api, node, False)

    lose("recovery_in_place_warm", in_place)
    proc.stop(timeout=60)
    # One fresh start varied from 24 to 33 s between runs of the same code on this machine: the figure is the
    # median of FRESH_RUNS, each run's kept. A run starts once the previous one's ranks are all bound (the lost
    # rank's old pod may still be leaving its node, behind 100,000 others for kwok: it holds nothing the next
    # run needs, as the next lost node is another).
    started: list[tuple[OperatorProcess, int]] = []
    runs = []
    for run in range(FRESH_RUNS):
        if started:
            started.pop()[0].stop(timeout=60)
        def start(run: int = run) -> None:
            started.append(ops.start_operator(f"{name}-fresh-{run}", reports=True)[:2])

        lose("recovery_in_place_fresh_operator", in_place, before_signal=start)
        runs.append(out["recovery_in_place_fresh_operator"])
    bound = [r["signal_to_all_bound_seconds"] for r in runs]
    out["recovery_in_place_fresh_operator"] = {**runs[0], "runs_signal_to_all_bound_seconds": bound,
                                               "median_signal_to_all_bound_seconds": median_or_none(bound)}
    proc, port = started[0]
    # Last: kwok deletes the old attempt's pods slowly behind 100,000 others on 2 cores (613 s once at 50,000).
    lose("recovery", recreate, timeout=1200)
    return proc, port


def main() -> None:
    arguments(__doc__)
    figures: dict = {"machine": {"cpus": os.cpu_count()}, "rig": fresh_cluster("superpod-12k")}
    api = KubeApi(workers=32)
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": ops.NS}})
    ops.apply_crds()
    figures["empty"] = {"rss_mib": component_rss(), **with_operator(api, "scale-empty", (128, 128, 1024))}
    ops.progress(figures)
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "background"}})
    nodes = sorted(n["metadata"]["name"] for n in api.list_all("/api/v1/nodes"))
    loaded: dict = {"background_pods": BACKGROUND_PODS,
                    "background_create_seconds": ops.create_background_pods(api, BACKGROUND_PODS, nodes)}
    loaded["rss_mib"] = component_rss()
    loaded.update(with_operator(api, "scale-loaded", (128, 128, 128, 1024), recover=True))
    loaded["kube_apiserver_rss_mib_end"] = component_rss(("kube-apiserver",))["kube-apiserver"]
    figures["with_background_pods"] = loaded
    emit(figures, None)


if __name__ == "__main__":
    main()
