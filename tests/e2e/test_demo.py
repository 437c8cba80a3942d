"""The README's first command: `make demo`'s own script, run on the test rig, places every example job
and binds its pods (it exits non-zero otherwise). Nothing else may run an operator meanwhile: the demo's
operator places every namespace's jobs."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.rig import REPO

pytestmark = pytest.mark.e2e


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / "hack" / "demo.sh"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "RAILYARD_METRICS_PORT": "0"})


def test_the_demo_places_every_example_job(kubeconfig, crds):
    if not os.environ.get("RAILYARD_LOCAL_RIG"):
        pytest.skip("the demo applies the examples to the default namespace: the local rig only")
    try:
        run = _demo("--on-rig")
        assert run.returncode == 0, f"hack/demo.sh --on-rig exited {run.returncode}:\n{run.stdout[-4000:]}\n" \
                                    f"{run.stderr[-2000:]}"
        assert "every example job is placed" in run.stdout
    finally:
        stop = _demo("stop")
        assert stop.returncode == 0, stop.stdout + stop.stderr
