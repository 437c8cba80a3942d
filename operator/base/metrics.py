"""Prometheus metrics (railyard_ prefix, base units; the client appends _total to counters)."""

from __future__ import annotations

import contextlib
import logging
from collections import Counter as Tally
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram, start_http_server
from railyard.topology.cluster.model import Snapshot

JOBS = Gauge("railyard_jobs", "TrainingJobs by state", ["state"])
QUEUE_LENGTH = Gauge("railyard_queue_length", "TrainingJobs waiting for placement")
SOLVE_SECONDS = Histogram("railyard_placement_solve_seconds", "Time to solve one gang placement",
                          buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
RELEASE_SECONDS = Histogram("railyard_job_release_seconds", "From TrainingJob creation to gang release",
                            buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300, 1800, 7200))
TORS_SPANNED = Histogram("railyard_job_tors_spanned", "TORs a placed gang spans", buckets=(1, 2, 3, 4, 6, 8, 16, 32))
FREE_GPUS = Gauge("railyard_free_gpus", "GPUs free on usable nodes")
TOTAL_GPUS = Gauge("railyard_gpus", "GPUs on usable nodes")
OLDEST_WAIT = Gauge("railyard_queue_oldest_wait_seconds",
                    "How long the longest-waiting unplaced TrainingJob has waited, by the reason it waits", ["reason"])
LARGEST_FREE_BLOCK = Gauge("railyard_largest_free_block_nodes", "Most fully free nodes inside one domain", ["tier"])
PLACEMENTS = Counter("railyard_placements", "Gangs placed")
PLACEMENT_FAILURES = Counter("railyard_placement_failures", "Placement attempts that failed", ["reason"])
IS_LEADER = Gauge("railyard_is_leader", "1 on the replica that holds the placement lease")


def serve(port: int) -> bool:
    """Expose /metrics; a busy port is logged, not fatal (placement matters more than metrics)."""
    if port <= 0:
        return False
    try:
        start_http_server(port)
    except OSError as e:
        logging.getLogger("railyard.metrics").error("metrics port %d unavailable: %s", port, e)
        return False
    return True


def observe_capacity(snapshot: Snapshot) -> None:
    """After every pass: from the snapshot's free-GPU array, not a free-GPU tuple per node."""
    free = snapshot.node_usage().free
    FREE_GPUS.set(int(free.sum()))
    TOTAL_GPUS.set(snapshot.total_gpus)
    empty = [node for node, count in zip(snapshot.nodes, free.tolist(), strict=True) if count == node.gpu_count]
    levels = snapshot.levels  # node, tor, leaf, spine by default; the configured levels' names otherwise
    whole: list[Tally[str]] = [Tally() for _ in range(levels.depth + 1)]
    for node in empty:
        for level, tally in enumerate(whole):
            tally[levels.domain_of(node, level)] += 1
    for level, tally in enumerate(whole):
        LARGEST_FREE_BLOCK.labels(levels.name(level)).set(max(tally.values(), default=0))
    LARGEST_FREE_BLOCK.labels("cluster").set(len(empty))

# Per job, for dashboards: one series per live job (state as a label, replaced on change), capped at
# RAILYARD_JOB_METRICS_LIMIT jobs so cardinality stays bounded on any cluster. The label is
# `trainingjob`: `job` is Prometheus' own target label and would be renamed on scrape.
JOB_STATE = Gauge("railyard_job_state", "1 for each TrainingJob, labelled with its state",
                  ["namespace", "trainingjob", "state"])
JOB_TORS = Gauge("railyard_job_tors", "TORs the job's placement spans", ["namespace", "trainingjob"])
JOB_REPLICAS = Gauge("railyard_job_replicas", "Replicas placed for the job", ["namespace", "trainingjob"])
JOB_RESTARTS = Gauge("railyard_job_restarts", "The job's generation: gang restarts so far",
                     ["namespace", "trainingjob"])
QUARANTINED_NODES = Gauge("railyard_quarantined_nodes", "Nodes carrying the railyard.dev/unhealthy taint")


JOB_LAST_CHECKPOINT = Gauge("railyard_job_last_checkpoint_timestamp_seconds",
                            "When the job's newest committed checkpoint was recorded (its start while it has none)",
                            ["namespace", "trainingjob"])
JOB_STEP_SECONDS = Gauge("railyard_job_step_seconds", "The job's median step time from its ranks' reports",
                         ["namespace", "trainingjob"])
JOB_STRAGGLERS = Gauge("railyard_job_stragglers", "The job's nodes below its straggler threshold",
                       ["namespace", "trainingjob"])
JOB_CHECKPOINT_INTERVAL = Gauge("railyard_job_checkpoint_interval_seconds",
                                "The job's spec.checkpoint.intervalSeconds hint", ["namespace", "trainingjob"])


@dataclass(frozen=True)
class JobFigures:
    namespace: str
    name: str
    state: str
    tors: int | None
    replicas: int
    restarts: int
    last_checkpoint: float | None = None  # epoch seconds (running jobs only)
    checkpoint_interval: int | None = None
    step_seconds: float | None = None
    stragglers: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


class JobSeries:
    """Publishes the per-job series and removes those of jobs that are gone or changed state."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._published: dict[tuple[str, str], JobFigures] = {}

    def update(self, jobs: list[JobFigures]) -> None:
        wanted = {j.key: j for j in sorted(jobs, key=lambda j: j.key)[:self.limit]}
        for key, old in list(self._published.items()):
            new = wanted.get(key)
            if new is None or new.state != old.state:
                JOB_STATE.remove(*key, old.state)
            if new is None:
                for gauge in (JOB_TORS, JOB_REPLICAS, JOB_RESTARTS):
                    gauge.remove(*key)
            for gauge, was, now in ((JOB_LAST_CHECKPOINT, old.last_checkpoint, new and new.last_checkpoint),
                                    (JOB_CHECKPOINT_INTERVAL, old.checkpoint_interval,
                                     new and new.checkpoint_interval),
                                    (JOB_STEP_SECONDS, old.step_seconds, new and new.step_seconds),
                                    (JOB_STRAGGLERS, old.stragglers, new and new.stragglers)):
                if was is not None and now is None:
                    gauge.remove(*key)
            if new is None:
                del self._published[key]
        for key, job in wanted.items():
            if self._published.get(key) == job:
                continue  # published as it is: most jobs, most passes
            JOB_STATE.labels(*key, job.state).set(1)
            JOB_TORS.labels(*key).set(job.tors or 0)
            JOB_REPLICAS.labels(*key).set(job.replicas)
            JOB_RESTARTS.labels(*key).set(job.restarts)
            if job.last_checkpoint is not None:
                JOB_LAST_CHECKPOINT.labels(*key).set(job.last_checkpoint)
            if job.checkpoint_interval is not None:
                JOB_CHECKPOINT_INTERVAL.labels(*key).set(job.checkpoint_interval)
            if job.step_seconds is not None:
                JOB_STEP_SECONDS.labels(*key).set(job.step_seconds)
            if job.stragglers is not None:
                JOB_STRAGGLERS.labels(*key).set(job.stragglers)
            self._published[key] = job


# Operator internals: API traffic, watch health, loop cost (bounded labels: verb, resource, kind).
API_REQUESTS = Counter("railyard_api_requests", "API requests sent by the operator", ["verb", "resource"])
FENCED_WRITES = Counter("railyard_fenced_writes", "Writes refused because the leadership term had ended")
WATCH_EVENTS = Counter("railyard_watch_events", "Watch events applied to the state", ["kind"])
RELISTS = Counter("railyard_relists", "Complete lists (initial and after a watch expired)", ["kind"])
# Fine between 0.1 and 2.5 s: where iterations of a 12,288-node cluster's loop land.
ITERATION_SECONDS = Histogram("railyard_placement_iteration_seconds", "One placement loop iteration",
                              buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75, 1,
                                       1.5, 2.5, 5, 10))
LOOP_LAG_SECONDS = Histogram("railyard_event_loop_lag_seconds", "How late the event loop runs a 100 ms timer",
                             buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
STATE_READY = Gauge("railyard_state_synced", "1 once Nodes, Pods and TrainingJobs have been listed")
REPLACEMENT_SECONDS = Histogram("railyard_replacement_solve_seconds", "Time to choose replacements for lost ranks",
                                buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
STRAGGLERS = Gauge("railyard_stragglers", "Nodes slow for minDurationSeconds under running gangs")
STRAGGLER_EVICTIONS = Counter("railyard_straggler_evictions", "Gangs restarted without a slow node")
EVICTIONS_SEEN = Counter("railyard_drain_evictions_seen", "Evictions of a running gang's pods the eviction webhook saw")
MAINTENANCE_MOVES = Counter("railyard_maintenance_moves", "Gangs moved off nodes under planned maintenance "
                            "(a drain or railyard.dev/maintenance)")
JOB_GOODPUT = Gauge("railyard_job_goodput_ratio", "Productive time over wall time since the gang first ran "
                    "(status.goodput.ratio; jobs whose ranks report)", ["namespace", "trainingjob"])
JOB_PRODUCTIVE_SECONDS = Counter("railyard_job_productive_seconds", "Wall time the job's ranks made progress past "
                                 "their best previous step", ["namespace", "trainingjob"])
JOB_LOST_SECONDS = Counter("railyard_job_lost_seconds", "Wall time the job made no new progress, by cause "
                           "(detection, capacity, restart, recompute, stalled)", ["namespace", "trainingjob", "cause"])
REPORTS = Counter("railyard_worker_reports", "Reports from railyard.worker, by result", ["result"])
RESIZE_SECONDS = Histogram("railyard_resize_decision_seconds", "Time to choose the replicas a resize keeps or adds",
                           buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
RESTARTS = Counter("railyard_restarts", "Gang restarts after lost nodes, by the first loss's reason", ["reason"])
PARTITION = Gauge("railyard_partition", "1 while the circuit breaker holds the fault path (many ranked nodes dark)")
UNREADY_RANKED_NODES = Gauge("railyard_unready_ranked_nodes", "Nodes holding Railyard ranks that are NotReady")
INFRA_RESTARTS_CAPPED = Gauge("railyard_infra_restarts_capped_jobs",
                              "Jobs whose infrastructure restarts hit the hourly cap (they wait, Degraded)")
PREEMPTIONS = Counter("railyard_preemptions", "Gang preemptions, by outcome (planned: victims chosen; evicted: "
                      "one victim requeued; shrunk: an elastic victim shrunk; cancelled: a victim let go on; "
                      "timed_out: a hold given up)", ["outcome"])
MIGRATIONS = Counter("railyard_migrations", "Gangs moved so a waiting gang fits in one domain (defragmentation)")
TORS_WITHOUT_SPARE = Gauge("railyard_tors_without_spare", "TORs with fewer whole free nodes than "
                           "RAILYARD_SPARES_PER_TOR (0 when no spares are kept)")
JOB_ERRORS = Counter("railyard_job_errors", "Unexpected errors handling one job (the pass went on)", ["stage"])


def forget_job_goodput(namespace: str, job: str) -> None:
    """A deleted job's goodput series go with it."""
    for metric in (JOB_GOODPUT, JOB_PRODUCTIVE_SECONDS):
        with contextlib.suppress(KeyError):
            metric.remove(namespace, job)
    for cause in ("detection", "capacity", "restart", "recompute", "stalled"):
        with contextlib.suppress(KeyError):
            JOB_LOST_SECONDS.remove(namespace, job, cause)
