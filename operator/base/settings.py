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
from railyard.topology.cluster.dra_devices import DeviceNames

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


def env_setting(name: str, default: T, parse: Callable[[str], T], doc: str, **constraints: Any) -> Any:
    """A field defaulting to RAILYARD_<name>; `doc` is what docs/operations.md's settings table says of it
    (hack/gen_docs.py reads the description and the variable from the field)."""
    return Field(default_factory=_env(name, default, parse), description=doc,
                 json_schema_extra={"env": f"RAILYARD_{name}", "shown": _shown(default)}, **constraints)


def _seconds(name: str, default: float, doc: str) -> Any:
    return env_setting(name, default, float, doc, ge=0)


def _shown(default: object) -> str:
    """A default as the settings table shows it."""
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LeaderSettings(_Settings):
    # The Lease's namespace: RAILYARD_LEASE_NAMESPACE (the chart: one for every release), else the
    # operator's own (RAILYARD_NAMESPACE).
    namespace: str = Field(
        default_factory=lambda: _env("LEASE_NAMESPACE", _env("NAMESPACE", "railyard-system", str)(), str)(),
        description="Where the Lease `railyard-operator` lives (the chart: `leaderElection.namespace`, one for "
                    "every release); default: the operator's namespace.",
        json_schema_extra={"env": "RAILYARD_LEASE_NAMESPACE", "shown": "RAILYARD_NAMESPACE"})
    lease_name: str = "railyard-operator"
    identity: str = Field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}")
    lease_seconds: float = _seconds(
        "LEASE_SECONDS", 15.0,
        "Leader Lease duration; a standby takes over this long after the leader stops renewing.")
    renew_seconds: float = _seconds("RENEW_SECONDS", 2.0, "How often the leader renews its Lease.")
    # This replica's own pod (the chart's downward API): the leader labels it railyard.dev/role=leader
    # so the reports Service sends workers to the leader only. Empty (run outside a pod): no label.
    pod_name: str = env_setting(
        "POD_NAME", "", str,
        "The operator's own pod (the chart's downward API): the leader labels it `railyard.dev/role=leader` so the "
        "reports Service reaches the leader only; empty outside a pod.")
    pod_namespace: str = Field(default_factory=_env("NAMESPACE", "", str),
                               description="The operator's own namespace (the chart's downward API).",
                               json_schema_extra={"env": "RAILYARD_NAMESPACE", "shown": "railyard-system"})


class PlacementSettings(_Settings):
    label_preset: str = env_setting(
        "LABEL_PRESET", "native", str,
        "Node label scheme(s) the topology is read from, comma-separated (docs/topology.md).")
    # A topology definition (labels.parse_levels): `name=labelKey,...` top to bottom, optionally
    # ending in `nvlink`; empty: the preset's spine/leaf/TOR levels.
    topology_levels: str = env_setting(
        "TOPOLOGY_LEVELS", "", str,
        "Topology levels `name=labelKey,...` top to bottom, optionally ending in `nvlink`; empty: the preset's spine,"
        " leaf, TOR.")
    # A job waiting longer than this reserves the nodes it waits for (docs/placement.md: queueing).
    starvation_seconds: float = _seconds(
        "STARVATION_SECONDS", 90.0,
        "A job waiting longer than this reserves the nodes it waits for (docs/placement.md#queueing-and-starvation).")
    # Released pods not bound within this long mean a lost race: the gang is re-planned. Any bind, and
    # any of the job's old pods leaving (a restart waits for them), starts the wait again.
    bind_timeout_seconds: float = _seconds(
        "BIND_TIMEOUT_SECONDS", 60.0,
        "Released pods not bound within this long (no bind progress) re-plan the gang.")
    # A released gang's Placed=Released goes out with its Running (one status write instead of two)
    # when it runs within this long, else on its own then; 0: written at the release.
    release_record_seconds: float = _seconds(
        "RELEASE_RECORD_SECONDS", 10.0,
        "A released gang's `Placed=Released` is written with its `Running` when it runs within this long (one status "
        "write instead of two); 0: at the release.")
    resync_seconds: float = _seconds("RESYNC_SECONDS", 5.0, "A placement pass runs at least this often.")
    # An unschedulable job is solved again when capacity is freed, or at the latest after this long.
    retry_seconds: float = _seconds(
        "RETRY_SECONDS", 30.0,
        "An unschedulable job is solved again when capacity is freed, or at the latest after this long.")
    # A node where a released pod could not be bound is avoided by that job for this long.
    avoid_seconds: float = _seconds(
        "AVOID_SECONDS", 600.0,
        "A node where a released pod could not be bound is avoided by that job for this long.")
    # A pod Terminating this long on a node that is gone is deleted with gracePeriodSeconds 0.
    force_delete_seconds: float = _seconds(
        "FORCE_DELETE_SECONDS", 60.0,
        "A pod Terminating this long on a node that is gone or NotReady is deleted with grace 0.")
    # A gang on a node being drained (or announced for maintenance) is asked to save a step first; it
    # moves when every rank saved it or after this long (then from its last committed checkpoint).
    maintenance_checkpoint_seconds: float = _seconds(
        "MAINTENANCE_CHECKPOINT_SECONDS", 300.0,
        "A gang on a node being drained or announced for maintenance waits this long for every rank to save the step "
        "it was asked for, then moves anyway (docs/faults.md#planned-maintenance).")
    # A PodDisruptionBudget per running gang, so a drain waits for that checkpoint. Only where the
    # eviction webhook tells this operator of drains (the chart sets it with the webhook): without it a
    # budget would hold `kubectl drain` for ever; then a drain evicts and the gang restarts (Drained).
    disruption_budgets: bool = env_setting(
        "DISRUPTION_BUDGETS", False, _bool,
        "A PodDisruptionBudget per running gang, so drains wait for its checkpoint; needs the eviction webhook (the "
        "chart sets it with `maintenance.evictionWebhook.enabled` and `reports.tls.enabled`).")
    # Taint a failed node railyard.dev/unhealthy=<reason>:NoSchedule so no job uses it until lifted,
    # for this long (a GPU-fault quarantine also while the fault condition is True).
    quarantine: bool = env_setting(
        "QUARANTINE", True, _bool,
        "Taint failed nodes `railyard.dev/unhealthy=<reason>:NoSchedule`.")
    quarantine_seconds: float = _seconds(
        "QUARANTINE_SECONDS", 3600.0,
        "How long a quarantine lasts (a GPU-fault quarantine also while the fault condition is True).")
    # Quarantine is the operator's, not a tenant's: at most this share of the GPU nodes (and, when set,
    # this many) carry Railyard's quarantine at once; none lasts longer than the longest (a
    # stragglerPolicy.quarantineSeconds above it, or 0, gets the longest); at most this many straggler
    # quarantines an hour cluster-wide; a job is evicted from at most this many slow nodes an hour
    # (its stragglerPolicy.maxEvictionsPerHour can only ask for fewer).
    quarantine_max_share: float = env_setting(
        "QUARANTINE_MAX_SHARE", 0.05, float,
        "At most this share of the GPU nodes quarantined at once (docs/security.md).", ge=0, le=1)
    quarantine_max_nodes: int = env_setting(
        "QUARANTINE_MAX_NODES", 0, int,
        "At most this many GPU nodes quarantined at once; 0: no count limit.", ge=0)
    quarantine_max_seconds: float = _seconds(
        "QUARANTINE_MAX_SECONDS", 86400.0,
        "The longest quarantine any policy may ask for.")
    straggler_quarantines_per_hour: int = env_setting(
        "STRAGGLER_QUARANTINES_PER_HOUR", 4, int,
        "Straggler quarantines an hour, cluster-wide.", ge=0)
    straggler_evictions_per_hour: int = env_setting(
        "STRAGGLER_EVICTIONS_PER_HOUR", 2, int,
        "Slow nodes a job is evicted from an hour at most (its `stragglerPolicy` may ask for fewer).", ge=0)
    # Node losses of one job within this window are handled as one restart.
    loss_debounce_seconds: float = _seconds(
        "LOSS_DEBOUNCE_SECONDS", 2.0,
        "Node losses of one job this close together make one restart.")
    # The same for losses seen only as NotReady (heartbeats): kubelets renew their lease every 10 s and
    # the node controller checks every 5 s, so nodes that died together turn NotReady up to ~15 s apart.
    not_ready_debounce_seconds: float = _seconds(
        "NOT_READY_DEBOUNCE_SECONDS", 15.0,
        "The same for losses seen only as NotReady (heartbeats of nodes that died together arrive up to ~15 s apart).")
    # Circuit breaker: more than this share (and at least min nodes) of the nodes holding ranks, or all of
    # at least min nodes of one leaf, turning NotReady within the window is a partition, not a fault.
    breaker_window_seconds: float = _seconds(
        "BREAKER_WINDOW_SECONDS", 60.0,
        "Circuit breaker window: nodes holding ranks turning NotReady within it count together (docs/faults.md#node-"
        "loss-and-restarts).")
    breaker_share: float = env_setting(
        "BREAKER_SHARE", 0.10, float,
        "More than this share of the nodes holding ranks NotReady within the window is a partition, not a fault.",
        ge=0, le=1)
    breaker_min_nodes: int = env_setting(
        "BREAKER_MIN_NODES", 3, int,
        "... and at least this many of them (or all of at least this many in one leaf).", ge=1)
    # Starving jobs hold a reservation at most this long, then the next starving job gets it.
    reservation_seconds: float = _seconds(
        "RESERVATION_SECONDS", 600.0,
        "A starving job holds its reservation at most this long, then the next starving job gets it.")
    # Reservations held at once, on disjoint nodes (each only the nodes its job waits for).
    max_reservations: int = env_setting(
        "MAX_RESERVATIONS", 1, int,
        "Reservations held at once, on disjoint nodes.", ge=1)
    # Infrastructure restarts (node loss, disruption, deletion) of one job back off from this, doubling up to
    # the max, and at most this many an hour (then the job waits, Degraded=RestartCap).
    infra_backoff_seconds: float = _seconds(
        "INFRA_BACKOFF_SECONDS", 10.0,
        "Infrastructure restarts of one job (node loss, disruption, deletion) back off from this, doubling.")
    infra_backoff_max_seconds: float = _seconds("INFRA_BACKOFF_MAX_SECONDS", 300.0, "... up to this.")
    infra_restarts_per_hour: int = env_setting(
        "INFRA_RESTARTS_PER_HOUR", 20, int,
        "Infrastructure restarts a job gets an hour; then it waits (`Degraded=RestartCap`).", ge=1)
    # Gang preemption (docs/placement.md, "Preemption"): a job that cannot be placed evicts whole
    # lower-priority gangs from one domain. Victims are asked to save a step first (at most the
    # checkpoint grace); a preemptor holds its domain at most the hold time, then gives it up; a job is
    # preempted at most this many times an hour.
    preemption: bool = env_setting(
        "PREEMPTION", True, _bool,
        "Gang preemption by PriorityClass value (docs/placement.md#preemption-defragmentation-and-hot-spares).")
    preemption_checkpoint_seconds: float = _seconds(
        "PREEMPTION_CHECKPOINT_SECONDS", 120.0,
        "A victim (or a moved gang) waits this long for the step it was asked to save.")
    preemption_hold_seconds: float = _seconds(
        "PREEMPTION_HOLD_SECONDS", 600.0,
        "A preemptor's landing nodes are held at most this long.")
    preemptions_per_hour: int = env_setting(
        "PREEMPTIONS_PER_HOUR", 2, int,
        "How often one job may be preempted an hour.", ge=0)
    # Hot spares: this many whole free nodes per TOR are kept out of first placements (jobs with
    # spec.preemption.backfillSpares may use them); replacements and restarts use them first.
    spares_per_tor: int = env_setting(
        "SPARES_PER_TOR", 0, int,
        "Whole free nodes per TOR kept out of first placements for replacements (`backfillSpares` jobs may use them).",
        ge=0)
    # Defragmentation: a queued gang that fits by free GPUs but not by topology has running gangs of
    # equal or lower priority that allow it (spec.preemption.migratable) moved out of one domain,
    # checkpoint first; at most this many moves an hour, a job at most once per interval.
    defragmentation: bool = env_setting(
        "DEFRAGMENTATION", False, _bool,
        "Move `migratable` gangs so a waiting gang fits in one domain.")
    migrations_per_hour: int = env_setting(
        "MIGRATIONS_PER_HOUR", 4, int,
        "Defragmentation moves an hour, cluster-wide.", ge=0)
    migration_interval_seconds: float = _seconds(
        "MIGRATION_INTERVAL_SECONDS", 3600.0,
        "A job is moved at most once per this interval.")
    # Time budget of one pass's solves: what does not fit in it waits for the next pass.
    solve_budget_seconds: float = _seconds(
        "SOLVE_BUDGET_SECONDS", 2.0,
        "Solve time of one pass; what does not fit in it waits for the next pass.")
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
    mode: DraMode = env_setting(
        "DRA", DraMode.AUTO, _dra_mode,
        "Pin GPUs and rail NICs through DRA ResourceClaims: `auto` (where ResourceSlices publish a node's GPUs), `on`"
        " (only such nodes), `off` (slices and claims not read).")
    gpu_driver: str = env_setting("DRA_GPU_DRIVER", "gpu.nvidia.com", str, "The DRA driver publishing GPUs.")
    gpu_class: str = env_setting("DRA_GPU_CLASS", "gpu.nvidia.com", str, "The DeviceClass GPU claims name.")
    nic_driver: str = env_setting("DRA_NIC_DRIVER", "dra.net", str, "The DRA driver publishing RDMA NICs.")
    nic_class: str = env_setting("DRA_NIC_CLASS", "rdma.dra.net", str, "The DeviceClass NIC claims name.")
    # The NIC attribute holding the HCA name NCCL_IB_HCA lists (the device name when a NIC has none).
    hca_attribute: str = env_setting(
        "DRA_HCA_ATTRIBUTE", "rdmaDevice", str,
        "The NIC attribute holding the HCA name `NCCL_IB_HCA` lists (the device name when a NIC has none).")

    @property
    def names(self) -> DeviceNames:
        return DeviceNames(self.gpu_driver, self.gpu_class, self.nic_driver, self.nic_class, self.hca_attribute)


class ApiSettings(_Settings):
    workers: int = env_setting("API_WORKERS", 24, int, "API requests in flight at most.", ge=1)


class MetricsSettings(_Settings):
    port: int = env_setting("METRICS_PORT", 8080, int, "Port of `/metrics`; 0: off.", ge=0)
    # Per-job series are published for at most this many jobs (bounded cardinality).
    job_limit: int = env_setting(
        "JOB_METRICS_LIMIT", 2000, int,
        "Per-job series are published for at most this many jobs.", ge=0)
    # The jobs' and capacity gauges are refreshed at most this often (a scrape comes every 15 s or more;
    # refreshing them on every pass was an eighth of the operator's CPU in a busy stream).
    publish_seconds: float = _seconds(
        "METRICS_PUBLISH_SECONDS", 2.0,
        "The jobs' and capacity gauges are refreshed at most this often.")


class HealthSettings(_Settings):
    port: int = env_setting("HEALTH_PORT", 8081, int, "Port of `/healthz`; 0: off.", ge=0)
    # Liveness fails when the placement loop has not completed a turn for this long.
    stall_seconds: float = _seconds(
        "STALL_SECONDS", 120.0,
        "Liveness fails when the placement loop has not turned for this long.")


class ReportSettings(_Settings):
    """The endpoint railyard.worker posts progress and checkpoint reports to."""

    # Port the endpoint listens on (0: off).
    port: int = env_setting(
        "REPORT_PORT", 8090, int,
        "Port of the report endpoint (and the eviction webhook); 0: off.", ge=0)
    # The URL pods are given (the chart sets the Service's); empty: pods get no reporting env or token.
    url: str = env_setting(
        "REPORT_URL", "", str,
        "The report URL pods are given (the chart sets its Service's); empty: pods get no reporting env or token.")
    audience: str = env_setting(
        "REPORT_AUDIENCE", "railyard.dev", str,
        "Audience of the projected token pods report with.")
    # TLS for the endpoint (a mounted Secret); plain HTTP when unset.
    tls_cert: str = env_setting(
        "REPORT_TLS_CERT", "", str,
        "Serving certificate of the report endpoint (PEM file); plain HTTP when unset.")
    tls_key: str = env_setting("REPORT_TLS_KEY", "", str, "Its key.")
    # The CA that signed the endpoint's certificate (PEM file): every gang pod gets it as
    # RAILYARD_REPORT_CA, the only CA railyard.worker trusts for the report URL.
    ca_file: str = env_setting(
        "REPORT_CA_FILE", "", str,
        "The CA that signed it (PEM file): every gang pod gets it as `RAILYARD_REPORT_CA`, the only CA "
        "`railyard.worker` trusts for the report URL.")
    # Per pod: sustained reports per second (bursts of 10 allowed); more get HTTP 429.
    rate_per_second: float = env_setting(
        "REPORT_RATE", 2.0, float,
        "Reports a second per pod (bursts of 10); more get HTTP 429.", gt=0)
    # Per source address, checked before the token is reviewed: sustained requests per second (bursts
    # of 50). One address can carry a node's 8 ranks (hostNetwork pods) and their retries.
    source_rate_per_second: float = env_setting(
        "REPORT_SOURCE_RATE", 50.0, float,
        "Requests a second per source address, before any TokenReview (bursts of 50).", gt=0)
    # TokenReviews the endpoint asks the API server for, at most, per second (bursts of as many): what a
    # flood of bogus tokens from many addresses costs the API server. Accepted tokens are cached, so
    # 16,384 pods need ~5 a second; after an operator restart all of them, spread over ~80 s.
    reviews_per_second: float = env_setting(
        "REPORT_REVIEWS_PER_SECOND", 200.0, float,
        "TokenReviews a second at most (accepted tokens are cached).", gt=0)
    # A job's status is written at most this often for report-derived fields (lastCheckpoint).
    flush_seconds: float = _seconds(
        "REPORT_FLUSH_SECONDS", 5.0,
        "Report-derived status (`lastCheckpoint`) is written at most this often.")
    # status.goodput is accounted on every flush and written this often (and when an attempt begins).
    goodput_write_seconds: float = _seconds(
        "GOODPUT_WRITE_SECONDS", 30.0,
        "`status.goodput` is written this often (accounted on every flush) (docs/faults.md#goodput).")
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
    test_pod_watch_delay: float = _seconds(
        "TEST_POD_WATCH_DELAY_SECONDS", 0.0,
        "Tests only: pod watch events delivered this many seconds late.")
    # Fault injection for the crash-safety e2e test only: exit right after this step.
    crash_after: str | None = Field(default_factory=lambda: os.environ.get("RAILYARD_TEST_CRASH_AFTER") or None)
