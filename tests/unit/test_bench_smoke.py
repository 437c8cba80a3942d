"""Every benchmark runs: the pure core's at a tiny size, printing JSON that says what it simulates; the rig's
and the peers' (which start their own rigs) as far as their arguments and imports (`python -m bench NAME -h`).
The figures themselves are docs/benchmarks.md's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from bench.__main__ import BENCHMARKS

from tests.support.rig import REPO

TINY = {
    "placement": ["--quick"],
    "reservation": ["--seeds", "11", "--thresholds", "90", "--seconds", "60"],
    "defrag": ["--seeds", "1", "--hours", "2"],
    "spares": ["--failures", "5"],
    "preemption": [],
    "stragglers": ["--quick"],
}


def _bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(REPO / "hack"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)


@pytest.mark.parametrize("name", sorted(TINY))
def test_the_pure_cores_benchmarks_run_at_a_tiny_size_and_print_json(name):
    run = _bench(name, *TINY[name])
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout[run.stdout.index("{"):])
    assert figures
    if name in ("reservation", "defrag", "spares"):  # the simulations say they run the operator's own decisions
        assert "plan_pass" in figures["simulation"] and "plan_pass" in run.stderr


@pytest.mark.parametrize("name", sorted(set(BENCHMARKS) - set(TINY) - {"ab"}))
def test_the_rig_and_peer_benchmarks_import_and_parse_their_arguments(name):
    run = _bench(name, "-h", timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]


def test_the_entry_point_lists_every_benchmark():
    run = _bench(timeout=60)
    assert run.returncode == 0 and all(name in run.stderr for name in BENCHMARKS)
