"""Operator settings, one frozen pydantic model per concern (as Kopf groups its settings). Each field
defaults to its RAILYARD_* environment variable when set; a malformed value stops the operator at
start with an error naming the variable and the value (never a bare ValueError mid-run)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from railyard.topology.devices import DeviceNames

T = TypeVar("T")


class SettingsError(ValueError):
    """A RAILYARD_* variable that cannot be read."""


def _env(name: str, default: T, parse: Callable[[str], T]) -> Callable[[], T]:
    """A default factory reading RAILYARD_<name>."""

    def read() -> T:
        raw = os.environ.get(f"RAILYARD_{name}")
        if raw is None or raw == "":
            return default
        try:
            return parse(raw)
        except ValueError:
            raise SettingsError(f"RAILYARD_{name}={raw!r}: expected {type(default).__name__}") from None

    return read


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _seconds(name: str, default: float) -> Any:
    return Field(default_factory=_env(name, default, float), ge=0)


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LeaderSettings(_Settings):
    # The Lease's namespace: RAILYARD_LEASE_NAMESPACE (the chart: one for every release), else the
    # operator's own (RAILYARD_NAMESPACE).
    namespace: str = Field(default_factory=lambda: _env("LEASE_NAMESPACE", _env("NAMESPACE", "railyard-system",
                                                                                str)(), str)())
    lease_name: str = "railyard-operator"
    identity: str = Field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}")
    lease_seconds: float = _seconds("LEASE_SECONDS", 15.0)
    renew_seconds: float = _seconds("RENEW_SECONDS", 2.0)
    # This replica's own pod (the chart's downward API): the leader labels it railyard.dev/role=leader
    # so the reports Service sends workers to the leader only. Empty (run outside a pod): no label.
    pod_name: str = Field(default_factory=_env("POD_NAME", "", str))
    pod_namespace: str = Field(default_factory=_env("NAMESPACE", "", str))


class PlacementSettings(_Settings):
    label_preset: str = Field(default_factory=_env("LABEL_PRESET", "native", str))
    # A topology definition (labels.parse_levels): `name=labelKey,...` top to bottom, optionally
    # ending in `nvlink`; empty: the preset's spine/leaf/TOR levels.
    topology_levels: str = Field(default_factory=_env("TOPOLOGY_LEVELS", "", str))
    # A job waiting longer than this reserves the nodes it waits for (docs/placement.md: queueing).
    starvation_seconds: float = _seconds("STARVATION_SECONDS", 90.0)
    # Released pods not bound within this long mean a lost race: the gang is re-planned. Any bind, and
    # any of the job's old pods leaving (a restart waits for them), starts the wait again.
    bind_timeout_seconds: float = _seconds("BIND_TIMEOUT_SECONDS", 60.0)
    # A released gang's Placed=Released goes out with its Running (one status write instead of two)
    # when it runs within this long, else on its own then; 0: written at the release.
    release_record_seconds: float = _seconds("RELEASE_RECORD_SECONDS", 10.0)
    resync_seconds: float = _seconds("RESYNC_SECONDS", 5.0)
    # An unschedulable job is solved again when capacity is freed, or at the latest after this long.
    retry_seconds: float = _seconds("RETRY_SECONDS", 30.0)
    # A node where a released pod could not be bound is avoided by that job for this long.
    avoid_seconds: float = _seconds("AVOID_SECONDS", 600.0)
    # A pod Terminating this long on a node that is gone is deleted with gracePeriodSeconds 0.
    force_delete_seconds: float = _seconds("FORCE_DELETE_SECONDS", 60.0)
    # A gang on a node being drained (or announced for maintenance) is asked to save a step first; it
    # moves when every rank saved it or after this long (then from its last committed checkpoint).
    maintenance_checkpoint_seconds: float = _seconds("MAINTENANCE_CHECKPOINT_SECONDS", 300.0)
    # A PodDisruptionBudget per running gang, so a drain waits for that checkpoint. Only where the
    # eviction webhook tells this operator of drains (the chart sets it with the webhook): without it a
    # budget would hold `kubectl drain` for ever; then a drain evicts and the gang restarts (Drained).
    disruption_budgets: bool = Field(default_factory=_env("DISRUPTION_BUDGETS", False, _bool))
    # Taint a failed node railyard.dev/unhealthy=<reason>:NoSchedule so no job uses it until lifted,
    # for this long (a GPU-fault quarantine also while the fault condition is True).
    quarantine: bool = Field(default_factory=_env("QUARANTINE", True, _bool))
    quarantine_seconds: float = _seconds("QUARANTINE_SECONDS", 3600.0)
    # Quarantine is the operator's, not a tenant's: at most this share of the GPU nodes (and, when set,
    # this many) carry Railyard's quarantine at once; none lasts longer than the longest (a
    # stragglerPolicy.quarantineSeconds above it, or 0, gets the longest); at most this many straggler
    # quarantines an hour cluster-wide; a job is evicted from at most this many slow nodes an hour
    # (its stragglerPolicy.maxEvictionsPerHour can only ask for fewer).
    quarantine_max_share: float = Field(default_factory=_env("QUARANTINE_MAX_SHARE", 0.05, float), ge=0, le=1)
    quarantine_max_nodes: int = Field(default_factory=_env("QUARANTINE_MAX_NODES", 0, int), ge=0)
    quarantine_max_seconds: float = _seconds("QUARANTINE_MAX_SECONDS", 86400.0)
    straggler_quarantines_per_hour: int = Field(default_factory=_env("STRAGGLER_QUARANTINES_PER_HOUR", 4, int), ge=0)
    straggler_evictions_per_hour: int = Field(default_factory=_env("STRAGGLER_EVICTIONS_PER_HOUR", 2, int), ge=0)
    # Node losses of one job within this window are handled as one restart.
    loss_debounce_seconds: float = _seconds("LOSS_DEBOUNCE_SECONDS", 2.0)
    # The same for losses seen only as NotReady (heartbeats): kubelets renew their lease every 10 s and
    # the node controller checks every 5 s, so nodes that died together turn NotReady up to ~15 s apart.
    not_ready_debounce_seconds: float = _seconds("NOT_READY_DEBOUNCE_SECONDS", 15.0)
    # Circuit breaker: more than this share (and at least min nodes) of the nodes holding ranks, or all of
    # at least min nodes of one leaf, turning NotReady within the window is a partition, not a fault.
    breaker_window_seconds: float = _seconds("BREAKER_WINDOW_SECONDS", 60.0)
    breaker_share: float = Field(default_factory=_env("BREAKER_SHARE", 0.10, float), ge=0, le=1)
    breaker_min_nodes: int = Field(default_factory=_env("BREAKER_MIN_NODES", 3, int), ge=1)
    # Starving jobs hold a reservation at most this long, then the next starving job gets it.
    reservation_seconds: float = _seconds("RESERVATION_SECONDS", 600.0)
    # Reservations held at once, on disjoint nodes (each only the nodes its job waits for).
    max_reservations: int = Field(default_factory=_env("MAX_RESERVATIONS", 1, int), ge=1)
    # Infrastructure restarts (node loss, disruption, deletion) of one job back off from this, doubling up to
    # the max, and at most this many an hour (then the job waits, Degraded=RestartCap).
    infra_backoff_seconds: float = _seconds("INFRA_BACKOFF_SECONDS", 10.0)
    infra_backoff_max_seconds: float = _seconds("INFRA_BACKOFF_MAX_SECONDS", 300.0)
    infra_restarts_per_hour: int = Field(default_factory=_env("INFRA_RESTARTS_PER_HOUR", 20, int), ge=1)
    # Gang preemption (docs/placement.md, "Preemption"): a job that cannot be placed evicts whole
    # lower-priority gangs from one domain. Victims are asked to save a step first (at most the
    # checkpoint grace); a preemptor holds its domain at most the hold time, then gives it up; a job is
    # preempted at most this many times an hour.
    preemption: bool = Field(default_factory=_env("PREEMPTION", True, _bool))
    preemption_checkpoint_seconds: float = _seconds("PREEMPTION_CHECKPOINT_SECONDS", 120.0)
    preemption_hold_seconds: float = _seconds("PREEMPTION_HOLD_SECONDS", 600.0)
    preemptions_per_hour: int = Field(default_factory=_env("PREEMPTIONS_PER_HOUR", 2, int), ge=0)
    # Hot spares: this many whole free nodes per TOR are kept out of first placements (jobs with
    # spec.preemption.backfillSpares may use them); replacements and restarts use them first.
    spares_per_tor: int = Field(default_factory=_env("SPARES_PER_TOR", 0, int), ge=0)
    # Defragmentation: a queued gang that fits by free GPUs but not by topology has running gangs of
    # equal or lower priority that allow it (spec.preemption.migratable) moved out of one domain,
    # checkpoint first; at most this many moves an hour, a job at most once per interval.
    defragmentation: bool = Field(default_factory=_env("DEFRAGMENTATION", False, _bool))
    migrations_per_hour: int = Field(default_factory=_env("MIGRATIONS_PER_HOUR", 4, int), ge=0)
    migration_interval_seconds: float = _seconds("MIGRATION_INTERVAL_SECONDS", 3600.0)
    # Time budget of one pass's solves: what does not fit in it waits for the next pass.
    solve_budget_seconds: float = _seconds("SOLVE_BUDGET_SECONDS", 2.0)
    master_port: int = 29500


class DraMode(StrEnum):
    """Whether replica pods get ResourceClaims pinning their devices (docs/placement.md: DRA)."""

    AUTO = "auto"  # per node: claims where ResourceSlices publish the node's GPUs, the device plugin elsewhere
    ON = "on"  # every node: a node whose GPUs no slice publishes is excluded, saying so
    OFF = "off"  # never: ResourceSlices and ResourceClaims are not read


def _dra_mode(raw: str) -> DraMode:
    try:
        return DraMode(raw.strip().lower())
    except ValueError:
        raise ValueError(raw) from None


class DraSettings(_Settings):
    mode: DraMode = Field(default_factory=_env("DRA", DraMode.AUTO, _dra_mode))
    gpu_driver: str = Field(default_factory=_env("DRA_GPU_DRIVER", "gpu.nvidia.com", str))
    gpu_class: str = Field(default_factory=_env("DRA_GPU_CLASS", "gpu.nvidia.com", str))
    nic_driver: str = Field(default_factory=_env("DRA_NIC_DRIVER", "dra.net", str))
    nic_class: str = Field(default_factory=_env("DRA_NIC_CLASS", "rdma.dra.net", str))
    # The NIC attribute holding the HCA name NCCL_IB_HCA lists (the device name when a NIC has none).
    hca_attribute: str = Field(default_factory=_env("DRA_HCA_ATTRIBUTE", "rdmaDevice", str))

    @property
    def names(self) -> DeviceNames:
        return DeviceNames(self.gpu_driver, self.gpu_class, self.nic_driver, self.nic_class, self.hca_attribute)


class ApiSettings(_Settings):
    workers: int = Field(default_factory=_env("API_WORKERS", 24, int), ge=1)


class MetricsSettings(_Settings):
    port: int = Field(default_factory=_env("METRICS_PORT", 8080, int), ge=0)
    # Per-job series are published for at most this many jobs (bounded cardinality).
    job_limit: int = Field(default_factory=_env("JOB_METRICS_LIMIT", 2000, int), ge=0)
    # The jobs' and capacity gauges are refreshed at most this often (a scrape comes every 15 s or more;
    # refreshing them on every pass was an eighth of the operator's CPU in a busy stream).
    publish_seconds: float = _seconds("METRICS_PUBLISH_SECONDS", 2.0)


class HealthSettings(_Settings):
    port: int = Field(default_factory=_env("HEALTH_PORT", 8081, int), ge=0)
    # Liveness fails when the placement loop has not completed a turn for this long.
    stall_seconds: float = _seconds("STALL_SECONDS", 120.0)


class ReportSettings(_Settings):
    """The endpoint railyard.worker posts progress and checkpoint reports to."""

    # Port the endpoint listens on (0: off).
    port: int = Field(default_factory=_env("REPORT_PORT", 8090, int), ge=0)
    # The URL pods are given (the chart sets the Service's); empty: pods get no reporting env or token.
    url: str = Field(default_factory=_env("REPORT_URL", "", str))
    audience: str = Field(default_factory=_env("REPORT_AUDIENCE", "railyard.dev", str))
    # TLS for the endpoint (a mounted Secret); plain HTTP when unset.
    tls_cert: str = Field(default_factory=_env("REPORT_TLS_CERT", "", str))
    tls_key: str = Field(default_factory=_env("REPORT_TLS_KEY", "", str))
    # The CA that signed the endpoint's certificate (PEM file): every gang pod gets it as
    # RAILYARD_REPORT_CA, the only CA railyard.worker trusts for the report URL.
    ca_file: str = Field(default_factory=_env("REPORT_CA_FILE", "", str))
    # Per pod: sustained reports per second (bursts of 10 allowed); more get HTTP 429.
    rate_per_second: float = Field(default_factory=_env("REPORT_RATE", 2.0, float), gt=0)
    # Per source address, checked before the token is reviewed: sustained requests per second (bursts
    # of 50). One address can carry a node's 8 ranks (hostNetwork pods) and their retries.
    source_rate_per_second: float = Field(default_factory=_env("REPORT_SOURCE_RATE", 50.0, float), gt=0)
    # TokenReviews the endpoint asks the API server for, at most, per second (bursts of as many): what a
    # flood of bogus tokens from many addresses costs the API server. Accepted tokens are cached, so
    # 16,384 pods need ~5 a second; after an operator restart all of them, spread over ~80 s.
    reviews_per_second: float = Field(default_factory=_env("REPORT_REVIEWS_PER_SECOND", 200.0, float), gt=0)
    # A job's status is written at most this often for report-derived fields (lastCheckpoint).
    flush_seconds: float = _seconds("REPORT_FLUSH_SECONDS", 5.0)
    # status.goodput is accounted on every flush and written this often (and when an attempt begins).
    goodput_write_seconds: float = _seconds("GOODPUT_WRITE_SECONDS", 30.0)
    # How often railyard.worker reports by default (Reporter.min_interval): a checkpoint request
    # targets a step far enough ahead that every rank hears of it first.
    worker_interval_seconds: float = 5.0
    # How long an accepted token is trusted at most (never past its own expiry).
    auth_cache_seconds: float = 3600.0


class Settings(_Settings):
    leader: LeaderSettings = Field(default_factory=LeaderSettings)
    placement: PlacementSettings = Field(default_factory=PlacementSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    reports: ReportSettings = Field(default_factory=ReportSettings)
    dra: DraSettings = Field(default_factory=DraSettings)
    # Fault injection for e2e tests only: deliver pod watch events this many seconds late.
    test_pod_watch_delay: float = _seconds("TEST_POD_WATCH_DELAY_SECONDS", 0.0)
    # Fault injection for the crash-safety e2e test only: exit right after this step.
    crash_after: str | None = Field(default_factory=lambda: os.environ.get("RAILYARD_TEST_CRASH_AFTER") or None)
