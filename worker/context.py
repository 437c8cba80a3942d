"""The environment contract between the operator (operator/decide/builders.py) and a rank."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_TOKEN_FILE = "/var/run/secrets/railyard.dev/token"


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r}: expected an integer") from None


@dataclass(frozen=True)
class Context:
    job: str
    namespace: str
    rank: int  # the pod's rank in the gang (what the operator checks reports against)
    world_size: int  # replicas in the gang
    local_rank: int  # the process inside the pod (torchrun's LOCAL_RANK; 0 without torchrun)
    restart_count: int  # the gang's restart count: which attempt this rank belongs to
    restart_reason: str
    resume_step: int | None  # the last checkpoint every rank saved (None: start from scratch)
    resume_checkpoint: str | None
    checkpoint_path: str | None  # spec.checkpoint.path
    checkpoint_interval_seconds: int | None
    report_url: str | None  # the operator's report endpoint (None: reporting off)
    report_file: str | None  # file transport (tests, or a sidecar that forwards)
    token_file: str
    report_ca_file: str | None
    report_ca: str | None = None  # PEM (RAILYARD_REPORT_CA, what the operator gives every pod)
    tensor_parallel: int = 1  # the job's layout, given with checkpoint.saveOnFault
    pipeline_parallel: int = 1
    gpus_per_replica: int = 1  # processes (GPUs) per pod

    def shard(self, local_rank: int | None = None) -> tuple[int, int]:
        """The (tensor, pipeline) coordinate of the model shard this pod's process `local_rank` holds (its own
        by default): the same layout as the operator's (GPU global rank g = t + T * (d + D * p)), so what one rank
        saved on a fault is found by whichever rank holds that shard next."""
        local = self.local_rank if local_rank is None else local_rank
        per_pod, tensor, pipeline = max(1, self.gpus_per_replica), self.tensor_parallel, self.pipeline_parallel
        data = max(1, self.world_size * per_pod // (tensor * pipeline))
        g = self.rank * per_pod + local
        return g % tensor, (g // tensor) // data

    def shard_name(self, local_rank: int | None = None) -> str:
        """A file name for that shard: `shard-t{tensor}-p{pipeline}`."""
        t, p = self.shard(local_rank)
        return f"shard-t{t}-p{p}"

    @property
    def resuming(self) -> bool:
        return self.resume_step is not None

    @property
    def first_step(self) -> int:
        """The step to run first: the one after the resume checkpoint's, else 0."""
        return self.resume_step + 1 if self.resume_step is not None else 0


def context(env: Mapping[str, str] | None = None) -> Context:
    """Read the contract from the environment; a malformed value names the variable."""
    e = os.environ if env is None else env
    # RAILYARD_RANK/RAILYARD_REPLICAS are the pod's: under torchrun, RANK and WORLD_SIZE count processes.
    rank = _int(e, "RAILYARD_RANK", _int(e, "RANK", 0))
    world = _int(e, "RAILYARD_REPLICAS", _int(e, "WORLD_SIZE", 1))
    assert rank is not None and world is not None
    return Context(
        job=e.get("RAILYARD_JOB_NAME", ""), namespace=e.get("RAILYARD_NAMESPACE", ""),
        rank=rank, world_size=world, local_rank=_int(e, "LOCAL_RANK", 0) or 0,
        restart_count=_int(e, "RAILYARD_RESTART_COUNT", 0) or 0,
        restart_reason=e.get("RAILYARD_RESTART_REASON", ""),
        resume_step=_int(e, "RAILYARD_RESUME_STEP"),
        resume_checkpoint=e.get("RAILYARD_RESUME_CHECKPOINT") or None,
        checkpoint_path=e.get("RAILYARD_CHECKPOINT_PATH") or None,
        checkpoint_interval_seconds=_int(e, "RAILYARD_CHECKPOINT_INTERVAL_SECONDS"),
        report_url=e.get("RAILYARD_REPORT_URL") or None,
        report_file=e.get("RAILYARD_REPORT_FILE") or None,
        token_file=e.get("RAILYARD_TOKEN_FILE") or DEFAULT_TOKEN_FILE,
        report_ca_file=e.get("RAILYARD_REPORT_CA_FILE") or None,
        report_ca=e.get("RAILYARD_REPORT_CA") or None,
        tensor_parallel=_int(e, "RAILYARD_TENSOR_PARALLEL", 1) or 1,
        pipeline_parallel=_int(e, "RAILYARD_PIPELINE_PARALLEL", 1) or 1,
        gpus_per_replica=_int(e, "RAILYARD_GPUS_PER_REPLICA", _int(e, "PET_NPROC_PER_NODE", 1)) or 1,
    )
