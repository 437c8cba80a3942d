"""What the benchmarks share: JSON output, waiting with a deadline, percentiles, process memory, the rig
(hack/cluster.py) and the superpod-2k snapshot the simulations run on."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HACK = Path(__file__).resolve().parents[1]
if str(HACK) not in sys.path:
    sys.path.insert(0, str(HACK))

import cluster  # noqa: E402  (hack/cluster.py)


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def wait(check: Callable[..., Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached in {timeout}s")


def served(api: Any, *paths: str) -> bool:
    """Every path answers a GET (a CRD's resources 404 until it is established, an object until
    its controller creates it)."""
    try:
        for path in paths:
            api.request("GET", path)
        return True
    except Exception:
        return False


def fresh_cluster(profile: str | None, k8s_gates: str | None = None, keep_job_pods: bool = False,
                  started_by: str = "a benchmark", upstream_lifecycle: bool = False) -> dict[str, float]:
    """Restart the rig (binaries already built) and return timings. `upstream_lifecycle`: Kubernetes'
    node-monitor defaults (throughput runs) instead of the fast lifecycle fault tests need."""
    subprocess.run([sys.executable, str(HACK / "cluster.py"), "down"], check=True, capture_output=True)
    t0 = time.monotonic()
    scale = profile is not None and len(cluster.load_profile_nodes(profile)) > cluster.SCALE_NODES
    cluster.up(None, k8s_gates, keep_job_pods, started_by=started_by, scale=scale,
               upstream_lifecycle=upstream_lifecycle)
    up_seconds = time.monotonic() - t0
    os.environ["KUBECONFIG"] = str(cluster.KUBECONFIG)
    figures = {"warm_up_seconds": round(up_seconds, 2)}
    if profile:
        nodes = cluster.load_profile_nodes(profile)
        t0 = time.monotonic()
        cluster.create_nodes(nodes)
        cluster.record_rig(profile)
        figures[f"create_{len(nodes)}_nodes_ready_seconds"] = round(time.monotonic() - t0, 2)
    return figures


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))], 3)


# kube-controller-manager's garbage collector re-reads API discovery this often. Until it has seen a
# new kind, every pod owned by an object of that kind makes it GET the owner (a "virtual" node in its
# graph): measured 0.5 extra requests per pod in the operator burst when the CRD was applied just
# before it — an artefact of installing the CRD minutes before the run, not of running a cluster.
GC_DISCOVERY_SECONDS = 30.0


def after_gc_discovery(applied_at: float) -> None:
    """Return once a garbage-collector discovery period (plus margin) has passed since `applied_at`
    (time.monotonic() when the owner kind's CRD was applied). The collector exposes no signal for
    its discovery resync, so this waits out the period."""
    remaining = applied_at + GC_DISCOVERY_SECONDS + 5 - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


def superpod_snapshot() -> Any:
    """The superpod-2k profile (2,048 nodes x 8 GPUs) as the solver's empty snapshot."""
    from railyard.topology.cluster.nodes import build_snapshot

    return build_snapshot(cluster.load_profile_nodes("superpod-2k"))


def measured() -> dict[str, str]:
    """When and on what code a result was measured (docs/benchmarks.md shows it): the UTC date and the commit
    (`+dirty` when the tree has changes)."""
    import datetime
    import subprocess

    repo = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/results"):  # results are outputs
        commit += "+dirty"
    return {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"), "commit": commit}


def emit(figures: dict[str, Any], out: Path | None) -> None:
    """Print the figures as JSON (with when and on what code they were measured), and write them to `out`
    when given."""
    text = json.dumps({"measured": measured(), **figures}, indent=2)
    print(text)
    if out is not None:
        out.write_text(text + "\n")


def arguments(doc: str | None, flags: dict[str, str] | None = None) -> argparse.Namespace:
    """A benchmark's command line: `-h` says what it runs (its docstring) and does nothing else; `flags` are
    its boolean options, name -> help. Sizes and peers come from the BENCH_*/COMPARE_* variables it documents."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, text in (flags or {}).items():
        parser.add_argument(flag, action="store_true", help=text)
    return parser.parse_args()
