"""Operator settings: one frozen pydantic model per concern (as Kopf groups its settings), each field with its
RAILYARD_* variable and what it sets (docs/operations.md's table is generated from them). The environment is
read in one place, `Settings.from_env`, at the operator's start: a malformed value stops it there with an error
naming the variable and the value (never a bare ValueError mid-run). `Settings()` is every default, whatever
the environment says (tests and simulations build exactly what they mean)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from enum import Enum, StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from railyard.topology.cluster.dra_devices import DeviceNames


class SettingsError(ValueError):
    """A RAILYARD_* variable that cannot be read."""


def setting(env: str, default: Any, doc: str, shown: str | None = None, **constraints: Any) -> Any:
    """A field read from RAILYARD_<env> by `Settings.from_env`; `doc` is what the settings table says of it."""
    return Field(default, description=doc, json_schema_extra={"env": f"RAILYARD_{env}",
                                                               "shown": _shown(default) if shown is None else shown},
                 **constraints)


def _shown(default: object) -> str:
    """A default as the settings table shows it."""
    if isinstance(default, Enum):
        return str(default.value)
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LeaderSettings(_Settings):
    """Leader election: exactly one replica places at a time."""

    namespace: str = setting(
        "LEASE_NAMESPACE", "railyard-system",
        "Where the Lease `railyard-operator` lives (the chart: `leaderElection.namespace`, one for every release); "
        "default: the operator's namespace.", shown="RAILYARD_NAMESPACE")
    lease_name: str = "railyard-operator"
    identity: str = Field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}")
    lease_seconds: float = setting(
        "LEASE_SECONDS", 15.0, "Leader Lease duration; a standby takes over this long after the leader stops "
        "renewing.", ge=0)
    renew_seconds: float = setting("RENEW_SECONDS", 2.0, "How often the leader renews its Lease.", ge=0)
    # The leader labels its own pod railyard.dev/role=leader so the reports Service sends workers to it alone.
    pod_name: str = setting(
        "POD_NAME", "", "The operator's own pod (the chart's downward API): the leader labels it "
        "`railyard.dev/role=leader` so the reports Service reaches the leader only; empty outside a pod.")
    pod_namespace: str = setting("NAMESPACE", "", "The operator's own namespace (the chart's downward API).",
                                 shown="railyard-system")


class PlacementSettings(_Settings):
    """The queue and the solver: how node labels read, when a waiting job reserves, how a pass is paced."""

    label_preset: str = setting(
        "LABEL_PRESET", "native", "Node label scheme(s) the topology is read from, comma-separated (docs/topology.md).")
    # A topology definition (labels.parse_levels): `name=labelKey,...` top to bottom, optionally ending in `nvlink`.
    topology_levels: str = setting(
        "TOPOLOGY_LEVELS", "", "Topology levels `name=labelKey,...` top to bottom, optionally ending in `nvlink`; "
        "empty: the preset's spine, leaf, TOR.")
    starvation_seconds: float = setting(
        "STARVATION_SECONDS", 90.0, "A job waiting longer than this reserves the nodes it waits for "
        "(docs/placement.md#queueing-and-starvation).", ge=0)
    reservation_seconds: float = setting(
        "RESERVATION_SECONDS", 600.0, "A starving job holds its reservation at most this long, then the next "
        "starving job gets it.", ge=0)
    max_reservations: int = setting("MAX_RESERVATIONS", 1, "Reservations held at once, on disjoint nodes.", ge=1)
    retry_seconds: float = setting(
        "RETRY_SECONDS", 30.0, "An unschedulable job is solved again when capacity is freed, or at the latest after "
        "this long.", ge=0)
    solve_budget_seconds: float = setting(
        "SOLVE_BUDGET_SECONDS", 2.0, "Solve time of one pass; what does not fit in it waits for the next pass.", ge=0)
    # Any bind, and any of the job's old pods leaving (a restart waits for them), starts the wait again.
    bind_timeout_seconds: float = setting(
        "BIND_TIMEOUT_SECONDS", 60.0, "Released pods not bound within this long (no bind progress) re-plan the gang.",
        ge=0)
    avoid_seconds: float = setting(
        "AVOID_SECONDS", 600.0, "A node where a released pod could not be bound is avoided by that job for this "
        "long.", ge=0)
    release_record_seconds: float = setting(
        "RELEASE_RECORD_SECONDS", 10.0, "A released gang's `Placed=Released` is written with its `Running` when it "
        "runs within this long (one status write instead of two); 0: at the release.", ge=0)
    resync_seconds: float = setting("RESYNC_SECONDS", 5.0, "A placement pass runs at least this often.", ge=0)
    express_pods: int = setting(
        "EXPRESS_PODS", 16, "Gangs of at most this many pods are created and released beside a larger gang's, not "
        "behind it, this many pods at once, their requests first (docs/placement.md#placing-crash-safety-and-ha); 0: "
        "strictly in turn.",
        ge=0)
    backfill_trust: float = setting(
        "BACKFILL_TRUST", 0.5, "A job backfills a reserved node only if its declared limit ends within this share of "
        "the time the node's occupants still declare (declared limits overestimate; 1: trust them as given).",
        gt=0, le=1)
    small_job_gpus: int = setting(
        "SMALL_JOB_GPUS", 0, "A job asking at most this many GPUs in all may use nodes reserved for a starving gang "
        "while an eighth of them or more are busy, declared limit or not, unless it could outlive the gang's start "
        "known from declared ends (docs/placement.md#small-jobs-and-reservations); 0: only backfill by declared "
        "limits.", ge=0)
    small_job_ahead_seconds: float = setting(
        "SMALL_JOB_AHEAD_SECONDS", 10.0, "With RAILYARD_SMALL_JOB_GPUS set, a small job that has waited this long "
        "goes ahead of the larger jobs of its priority in the queue (a gang already holding a reservation still "
        "comes first).", ge=0)
    master_port: int = 29500


class PreemptionSettings(_Settings):
    """Gang preemption (docs/placement.md#preemption-defragmentation-and-hot-spares)."""

    enabled: bool = setting(
        "PREEMPTION", True, "Gang preemption by PriorityClass value "
        "(docs/placement.md#preemption-defragmentation-and-hot-spares).")
    checkpoint_seconds: float = setting(
        "PREEMPTION_CHECKPOINT_SECONDS", 120.0, "A victim (or a moved gang) waits this long for the step it was "
        "asked to save.", ge=0)
    hold_seconds: float = setting(
        "PREEMPTION_HOLD_SECONDS", 600.0, "A preemptor's landing nodes are held at most this long.", ge=0)
    per_hour: int = setting("PREEMPTIONS_PER_HOUR", 2, "How often one job may be preempted an hour.", ge=0)


class DefragmentationSettings(_Settings):
    """Moving `spec.preemption.migratable` gangs so a waiting gang fits in one domain (opt-in)."""

    enabled: bool = setting("DEFRAGMENTATION", False, "Move `migratable` gangs so a waiting gang fits in one domain.")
    migrations_per_hour: int = setting("MIGRATIONS_PER_HOUR", 4, "Defragmentation moves an hour, cluster-wide.", ge=0)
    interval_seconds: float = setting(
        "MIGRATION_INTERVAL_SECONDS", 3600.0, "A job is moved at most once per this interval.", ge=0)


class SpareSettings(_Settings):
    """Hot spares: whole free nodes per TOR kept for replacements."""

    per_tor: int = setting(
        "SPARES_PER_TOR", 0, "Whole free nodes per TOR kept out of first placements for replacements "
        "(`backfillSpares` jobs may use them).", ge=0)


class FaultSettings(_Settings):
    """The fault path: when losses make a restart, the circuit breaker, the storm brakes."""

    loss_debounce_seconds: float = setting(
        "LOSS_DEBOUNCE_SECONDS", 2.0, "Node losses of one job this close together make one restart.", ge=0)
    # Kubelets renew their lease every 10 s and the node controller checks every 5 s: nodes that died together
    # turn NotReady up to ~15 s apart.
    not_ready_debounce_seconds: float = setting(
        "NOT_READY_DEBOUNCE_SECONDS", 15.0, "The same for losses seen only as NotReady (heartbeats of nodes that "
        "died together arrive up to ~15 s apart).", ge=0)
    force_delete_seconds: float = setting(
        "FORCE_DELETE_SECONDS", 60.0, "A pod Terminating this long on a node that is gone or NotReady is deleted "
        "with grace 0.", ge=0)
    breaker_window_seconds: float = setting(
        "BREAKER_WINDOW_SECONDS", 60.0, "Circuit breaker window: nodes holding ranks turning NotReady within it "
        "count together (docs/faults.md#node-loss-and-restarts).", ge=0)
    breaker_share: float = setting(
        "BREAKER_SHARE", 0.10, "More than this share of the nodes holding ranks NotReady within the window is a "
        "partition, not a fault.", ge=0, le=1)
    breaker_min_nodes: int = setting(
        "BREAKER_MIN_NODES", 3, "... and at least this many of them (or all of at least this many in one leaf).",
        ge=1)
    infra_backoff_seconds: float = setting(
        "INFRA_BACKOFF_SECONDS", 10.0, "Infrastructure restarts of one job (node loss, disruption, deletion) back "
        "off from this, doubling.", ge=0)
    infra_backoff_max_seconds: float = setting("INFRA_BACKOFF_MAX_SECONDS", 300.0, "... up to this.", ge=0)
    infra_restarts_per_hour: int = setting(
        "INFRA_RESTARTS_PER_HOUR", 20, "Infrastructure restarts a job gets an hour; then it waits "
        "(`Degraded=RestartCap`).", ge=1)
    save_on_fault_seconds: float = setting(
        "SAVE_ON_FAULT_SECONDS", 60.0, "How long a fault's restart waits for the surviving ranks of a job with "
        "`checkpoint.saveOnFault` to save the last step they completed (docs/faults.md#save-on-fault).", ge=0)


class QuarantineSettings(_Settings):
    """Railyard's own actions against nodes, bounded (docs/security.md)."""

    enabled: bool = setting("QUARANTINE", True, "Taint failed nodes `railyard.dev/unhealthy=<reason>:NoSchedule`.")
    seconds: float = setting(
        "QUARANTINE_SECONDS", 3600.0, "How long a quarantine lasts (a GPU-fault quarantine also while the fault "
        "condition is True).", ge=0)
    max_share: float = setting(
        "QUARANTINE_MAX_SHARE", 0.05, "At most this share of the GPU nodes quarantined at once (docs/security.md).",
        ge=0, le=1)
    max_nodes: int = setting(
        "QUARANTINE_MAX_NODES", 0, "At most this many GPU nodes quarantined at once; 0: no count limit.", ge=0)
    max_seconds: float = setting(
        "QUARANTINE_MAX_SECONDS", 86400.0, "The longest quarantine any policy may ask for.", ge=0)
    straggler_quarantines_per_hour: int = setting(
        "STRAGGLER_QUARANTINES_PER_HOUR", 4, "Straggler quarantines an hour, cluster-wide.", ge=0)
    straggler_evictions_per_hour: int = setting(
        "STRAGGLER_EVICTIONS_PER_HOUR", 2, "Slow nodes a job is evicted from an hour at most (its `stragglerPolicy` "
        "may ask for fewer).", ge=0)


class MaintenanceSettings(_Settings):
    """Planned maintenance: drains wait for a gang's checkpoint (docs/faults.md#planned-maintenance)."""

    checkpoint_seconds: float = setting(
        "MAINTENANCE_CHECKPOINT_SECONDS", 300.0, "A gang on a node being drained or announced for maintenance waits "
        "this long for every rank to save the step it was asked for, then moves anyway "
        "(docs/faults.md#planned-maintenance); the eviction webhook holds a drain's evictions of its ranks at most "
        "this long.", ge=0)


class DraMode(StrEnum):
    """Whether replica pods get ResourceClaims pinning their devices (docs/placement.md: DRA)."""

    AUTO = "auto"  # per node: claims where ResourceSlices publish the node's GPUs, the device plugin elsewhere
    ON = "on"  # every node: a node whose GPUs no slice publishes is excluded, saying so
    OFF = "off"  # never: ResourceSlices and ResourceClaims are not read


class DraSettings(_Settings):
    """GPUs and rail NICs pinned through DRA ResourceClaims (docs/placement.md#gpus-and-rail-nics-through-dra)."""

    mode: DraMode = setting(
        "DRA", DraMode.AUTO, "Pin GPUs and rail NICs through DRA ResourceClaims: `auto` (where ResourceSlices publish "
        "a node's GPUs), `on` (only such nodes), `off` (slices and claims not read).")
    gpu_driver: str = setting("DRA_GPU_DRIVER", "gpu.nvidia.com", "The DRA driver publishing GPUs.")
    gpu_class: str = setting("DRA_GPU_CLASS", "gpu.nvidia.com", "The DeviceClass GPU claims name.")
    nic_driver: str = setting("DRA_NIC_DRIVER", "dra.net", "The DRA driver publishing RDMA NICs.")
    nic_class: str = setting("DRA_NIC_CLASS", "rdma.dra.net", "The DeviceClass NIC claims name.")
    hca_attribute: str = setting(
        "DRA_HCA_ATTRIBUTE", "rdmaDevice", "The NIC attribute holding the HCA name `NCCL_IB_HCA` lists (the device "
        "name when a NIC has none).")

    @property
    def names(self) -> DeviceNames:
        return DeviceNames(self.gpu_driver, self.gpu_class, self.nic_driver, self.nic_class, self.hca_attribute)


class ApiSettings(_Settings):
    """The API client."""

    workers: int = setting("API_WORKERS", 24, "API requests in flight at most.", ge=1)


class MetricsSettings(_Settings):
    """Prometheus metrics."""

    port: int = setting("METRICS_PORT", 8080, "Port of `/metrics`; 0: off.", ge=0)
    job_limit: int = setting("JOB_METRICS_LIMIT", 2000, "Per-job series are published for at most this many jobs.",
                             ge=0)
    # A scrape comes every 15 s or more; refreshing the gauges on every pass was an eighth of the operator's CPU
    # in a busy stream.
    publish_seconds: float = setting(
        "METRICS_PUBLISH_SECONDS", 2.0, "The jobs' and capacity gauges are refreshed at most this often.", ge=0)


class HealthSettings(_Settings):
    """Liveness."""

    port: int = setting("HEALTH_PORT", 8081, "Port of `/healthz`; 0: off.", ge=0)
    stall_seconds: float = setting(
        "STALL_SECONDS", 120.0, "Liveness fails when the placement loop has not turned for this long.", ge=0)


class ReportSettings(_Settings):
    """The endpoint railyard.worker posts progress and checkpoint reports to."""

    port: int = setting("REPORT_PORT", 8090, "Port of the report endpoint (and the eviction webhook); 0: off.", ge=0)
    url: str = setting(
        "REPORT_URL", "", "The report URL pods are given (the chart sets its Service's); empty: pods get no "
        "reporting env or token.")
    audience: str = setting("REPORT_AUDIENCE", "railyard.dev", "Audience of the projected token pods report with.")
    tls_cert: str = setting(
        "REPORT_TLS_CERT", "", "Serving certificate of the report endpoint (PEM file); plain HTTP when unset.")
    tls_key: str = setting("REPORT_TLS_KEY", "", "Its key.")
    ca_file: str = setting(
        "REPORT_CA_FILE", "", "The CA that signed it (PEM file): every gang pod gets it as `RAILYARD_REPORT_CA`, the "
        "only CA `railyard.worker` trusts for the report URL.")
    webhook_client_ca: str = setting(
        "WEBHOOK_CLIENT_CA", "", "The CA of the API server's client certificate towards webhooks (PEM file): the "
        "eviction webhook then answers only a peer presenting a certificate it signed (forged AdmissionReviews "
        "from pods are refused); empty: only the chart's NetworkPolicy keeps pods from the webhook "
        "(docs/security.md).")
    rate_per_second: float = setting(
        "REPORT_RATE", 2.0, "Reports a second per pod (bursts of 10); more get HTTP 429.", gt=0)
    # One address can carry a node's 8 ranks (hostNetwork pods) and their retries.
    source_rate_per_second: float = setting(
        "REPORT_SOURCE_RATE", 50.0, "Requests a second per source address, before any TokenReview (bursts of 50).",
        gt=0)
    # Accepted tokens are cached, so 16,384 pods need ~5 a second; after an operator restart all of them, over ~80 s.
    reviews_per_second: float = setting(
        "REPORT_REVIEWS_PER_SECOND", 200.0, "TokenReviews a second at most (accepted tokens are cached).", gt=0)
    flush_seconds: float = setting(
        "REPORT_FLUSH_SECONDS", 5.0, "Report-derived status (`lastCheckpoint`) is written at most this often.", ge=0)
    goodput_write_seconds: float = setting(
        "GOODPUT_WRITE_SECONDS", 30.0, "`status.goodput` is written this often (accounted on every flush) "
        "(docs/faults.md#goodput).", ge=0)
    # How often railyard.worker reports by default (Reporter.min_interval): a checkpoint request targets a step far
    # enough ahead that every rank hears of it first.
    worker_interval_seconds: float = 5.0
    # How long an accepted token is trusted at most (never past its own expiry).
    auth_cache_seconds: float = 3600.0


class Settings(_Settings):
    leader: LeaderSettings = Field(default_factory=LeaderSettings)
    placement: PlacementSettings = Field(default_factory=PlacementSettings)
    preemption: PreemptionSettings = Field(default_factory=PreemptionSettings)
    defragmentation: DefragmentationSettings = Field(default_factory=DefragmentationSettings)
    spares: SpareSettings = Field(default_factory=SpareSettings)
    faults: FaultSettings = Field(default_factory=FaultSettings)
    quarantine: QuarantineSettings = Field(default_factory=QuarantineSettings)
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    reports: ReportSettings = Field(default_factory=ReportSettings)
    dra: DraSettings = Field(default_factory=DraSettings)
    # Fault injection for e2e tests only: deliver pod watch events this many seconds late.
    test_pod_watch_delay: float = setting(
        "TEST_POD_WATCH_DELAY_SECONDS", 0.0, "Tests only: pod watch events delivered this many seconds late.", ge=0)
    # Fault injection for the crash-safety e2e test only: exit right after this step.
    crash_after: str | None = setting("TEST_CRASH_AFTER", None, "Tests only: exit right after this step.")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Every RAILYARD_* variable set (empty counts as unset); the rest default. The Lease's namespace defaults
        to the operator's own (RAILYARD_NAMESPACE)."""
        env = dict(os.environ if environ is None else environ)
        if not env.get("RAILYARD_LEASE_NAMESPACE") and env.get("RAILYARD_NAMESPACE"):
            env["RAILYARD_LEASE_NAMESPACE"] = env["RAILYARD_NAMESPACE"]
        values: dict[str, Any] = {}
        for variable, (_, field_type) in _VARIABLES.items():
            raw = env.get(variable)
            if raw is not None and raw != "":
                values[variable] = _parse(variable, raw, field_type)
        return cls.of(values, given=env)

    @classmethod
    def of(cls, values: Mapping[str, Any], given: Mapping[str, Any] | None = None) -> Settings:
        """Settings from typed values keyed by their RAILYARD_* variable (what from_env reads, and what tests
        and simulations set); an error shows the value as `given` (the environment's text)."""
        given = values if given is None else given
        nested: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for variable, value in values.items():
            if variable not in _VARIABLES:
                raise SettingsError(f"{variable}: no such setting")
            path, _ = _VARIABLES[variable]
            if len(path) == 1:
                top[path[0]] = value
            else:
                nested.setdefault(path[0], {})[path[1]] = value
        concerns: dict[str, Any] = {}
        for concern, fields in nested.items():
            try:
                concerns[concern] = cls.model_fields[concern].annotation(**fields)  # type: ignore[misc]
            except ValidationError as e:
                raise _error(e, (concern,), given) from None
        try:
            return cls(**top, **concerns)
        except ValidationError as e:
            raise _error(e, (), given) from None


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """RAILYARD_* variables that set nothing (a typo an admin should hear of: from_env ignores them)."""
    return sorted(name for name in environ if name.startswith("RAILYARD_") and name not in _VARIABLES
                  and name not in _NOT_SETTINGS)


# Read elsewhere: the CLI's traceback switch and the e2e suite's cluster opt-in.
_NOT_SETTINGS = frozenset({"RAILYARD_DEBUG", "RAILYARD_E2E_CLUSTER", "RAILYARD_LOCAL_RIG", "RAILYARD_CLUSTER_DIR"})


def _error(e: ValidationError, within: tuple[str, ...], values: Mapping[str, Any]) -> SettingsError:
    """The first error, naming its variable and the value given."""
    error = e.errors()[0]
    path = (*within, *(str(part) for part in error["loc"][:1]))
    variable = next((v for v, (where, _) in _VARIABLES.items() if where == path), ".".join(path))
    return SettingsError(f"{variable}={values.get(variable, error.get('input'))!r}: {error['msg']}")


def _parse(variable: str, raw: str, field_type: Any) -> Any:
    try:
        if field_type is bool:
            value = raw.strip().lower()
            if value in ("1", "true", "yes", "on"):
                return True
            if value in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(field_type, type) and issubclass(field_type, Enum):
            return field_type(raw.strip().lower())
        if field_type in (int, float):
            return field_type(raw)
        return raw
    except ValueError:
        expected = getattr(field_type, "__name__", str(field_type))
        raise SettingsError(f"{variable}={raw!r}: expected {expected}") from None


def _variables() -> dict[str, tuple[tuple[str, ...], Any]]:
    """RAILYARD_* variable -> (where it lives in Settings, its type)."""
    out: dict[str, tuple[tuple[str, ...], Any]] = {}

    def walk(model: type[BaseModel], path: tuple[str, ...]) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, (*path, name))
                continue
            extra = field.json_schema_extra
            if isinstance(extra, dict) and "env" in extra:
                field_type = annotation if annotation is not None else str
                if getattr(field_type, "__args__", None):  # `str | None`
                    field_type = str
                out[str(extra["env"])] = ((*path, name), field_type)

    walk(Settings, ())
    return out


_VARIABLES = _variables()
