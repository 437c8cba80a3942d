"""Operator settings, grouped (as Kopf does): each group is a frozen dataclass with defaults that
can be overridden from RAILYARD_* environment variables."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field


def _env(name: str, default: str) -> str:
    return os.environ.get(f"RAILYARD_{name}", default)


@dataclass(frozen=True)
class LeaderSettings:
    namespace: str = field(default_factory=lambda: _env("NAMESPACE", "railyard-system"))
    lease_name: str = "railyard-operator"
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}")
    lease_seconds: float = field(default_factory=lambda: float(_env("LEASE_SECONDS", "15")))
    renew_seconds: float = field(default_factory=lambda: float(_env("RENEW_SECONDS", "2")))


@dataclass(frozen=True)
class PlacementSettings:
    label_preset: str = field(default_factory=lambda: _env("LABEL_PRESET", "native"))
    # A topology definition (labels.parse_levels): `name=labelKey,...` top to bottom, optionally
    # ending in `nvlink`; empty: the preset's spine/leaf/TOR levels.
    topology_levels: str = field(default_factory=lambda: _env("TOPOLOGY_LEVELS", ""))
    # A job waiting longer than this reserves the domain it waits for (see README: queueing).
    starvation_seconds: float = field(default_factory=lambda: float(_env("STARVATION_SECONDS", "120")))
    # Released pods not bound within this long mean a lost race: the gang is re-planned.
    bind_timeout_seconds: float = field(default_factory=lambda: float(_env("BIND_TIMEOUT_SECONDS", "60")))
    resync_seconds: float = field(default_factory=lambda: float(_env("RESYNC_SECONDS", "5")))
    # An unschedulable job is solved again when capacity is freed, or at the latest after this long.
    retry_seconds: float = field(default_factory=lambda: float(_env("RETRY_SECONDS", "30")))
    # A node where a released pod could not be bound is avoided by that job for this long.
    avoid_seconds: float = field(default_factory=lambda: float(_env("AVOID_SECONDS", "600")))
    # A pod Terminating this long on a node that is gone is deleted with gracePeriodSeconds 0.
    force_delete_seconds: float = field(default_factory=lambda: float(_env("FORCE_DELETE_SECONDS", "60")))
    # Taint a lost node railyard.dev/unhealthy=<reason>:NoSchedule so no job uses it until lifted.
    quarantine: bool = field(default_factory=lambda: _env("QUARANTINE", "true").lower() in ("1", "true", "yes"))
    # Node losses of one job within this window are handled as one restart.
    loss_debounce_seconds: float = field(default_factory=lambda: float(_env("LOSS_DEBOUNCE_SECONDS", "2")))
    # The same for losses seen only as NotReady (heartbeats): kubelets renew their lease every 10 s and
    # the node controller checks every 5 s, so nodes that died together turn NotReady up to ~15 s apart.
    not_ready_debounce_seconds: float = field(
        default_factory=lambda: float(_env("NOT_READY_DEBOUNCE_SECONDS", "15")))
    master_port: int = 29500


@dataclass(frozen=True)
class ApiSettings:
    workers: int = field(default_factory=lambda: int(_env("API_WORKERS", "24")))


@dataclass(frozen=True)
class MetricsSettings:
    port: int = field(default_factory=lambda: int(_env("METRICS_PORT", "8080")))
    # Per-job series are published for at most this many jobs (bounded cardinality).
    job_limit: int = field(default_factory=lambda: int(_env("JOB_METRICS_LIMIT", "2000")))


@dataclass(frozen=True)
class HealthSettings:
    port: int = field(default_factory=lambda: int(_env("HEALTH_PORT", "8081")))
    # Liveness fails when the placement loop has not completed a turn for this long.
    stall_seconds: float = field(default_factory=lambda: float(_env("STALL_SECONDS", "120")))


@dataclass(frozen=True)
class ReportSettings:
    """The endpoint railyard.worker posts progress and checkpoint reports to."""

    # Port the endpoint listens on (0: off).
    port: int = field(default_factory=lambda: int(_env("REPORT_PORT", "8090")))
    # The URL pods are given (the chart sets the Service's); empty: pods get no reporting env or token.
    url: str = field(default_factory=lambda: _env("REPORT_URL", ""))
    audience: str = field(default_factory=lambda: _env("REPORT_AUDIENCE", "railyard.dev"))
    # TLS for the endpoint (a mounted Secret); plain HTTP when unset.
    tls_cert: str = field(default_factory=lambda: _env("REPORT_TLS_CERT", ""))
    tls_key: str = field(default_factory=lambda: _env("REPORT_TLS_KEY", ""))
    # Per pod: sustained reports per second (bursts of 10 allowed); more get HTTP 429.
    rate_per_second: float = field(default_factory=lambda: float(_env("REPORT_RATE", "2")))
    # A job's status is written at most this often for report-derived fields (lastCheckpoint).
    flush_seconds: float = field(default_factory=lambda: float(_env("REPORT_FLUSH_SECONDS", "5")))
    # How often railyard.worker reports by default (Reporter.min_interval): a checkpoint request
    # targets a step far enough ahead that every rank hears of it first.
    worker_interval_seconds: float = 5.0
    # How long an accepted token is trusted at most (never past its own expiry).
    auth_cache_seconds: float = 3600.0


@dataclass(frozen=True)
class Settings:
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    reports: ReportSettings = field(default_factory=ReportSettings)
    # Fault injection for e2e tests only: deliver pod watch events this many seconds late.
    test_pod_watch_delay: float = field(default_factory=lambda: float(_env("TEST_POD_WATCH_DELAY_SECONDS", "0")))
    # Fault injection for the crash-safety e2e test only: exit right after this step.
    crash_after: str | None = field(default_factory=lambda: os.environ.get("RAILYARD_TEST_CRASH_AFTER") or None)
