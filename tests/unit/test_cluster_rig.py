"""The rig rejects a malformed cluster profile before starting anything, naming field and value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("spec", "message"), [
    ("spines: 0\n  leavesPerSpine: 1\n  torsPerLeaf: 1\n  nodesPerTor: 1",
     "spec.spines: Input should be greater than or equal to 1 (got 0)"),
    ("spines: 1\n  leavesPerSpine: 1\n  torsPerLeaf: 1\n  nodesPerTor: 1\n  node: {gpus: 8, gpuRail: [0, 1]}",
     "gpuRail has 2 entries but gpus is 8"),
    ("spines: 1\n  leavesPerSpine: 1\n  torsPerLeaf: 1\n  nodesPerTor: 1\n  racks: 2",
     "spec.racks: Extra inputs are not permitted"),
])
def test_malformed_profile_is_rejected_before_anything_starts(tmp_path, spec, message):
    profile = tmp_path / "bad.yaml"
    profile.write_text(f"apiVersion: railyard.dev/v1alpha1\nkind: ClusterProfile\nmetadata: {{name: bad}}\n"
                       f"spec:\n  {spec}\n")
    state = tmp_path / "state"
    env = {"RAILYARD_CLUSTER_DIR": str(state), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, str(REPO / "hack" / "cluster.py"), "up", "--profile", str(profile)],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert str(profile) in result.stderr and message in result.stderr
    assert not state.exists(), "a rejected profile must not leave state (or processes) behind"


def test_unknown_profile_lists_the_known_ones(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "hack" / "cluster.py"), "up", "--profile", "nope"],
                            capture_output=True, text=True, env={"RAILYARD_CLUSTER_DIR": str(tmp_path / "s"),
                                                                 "HOME": str(tmp_path)})
    assert result.returncode == 1 and "known: " in result.stderr and "small" in result.stderr


@pytest.mark.parametrize(("node", "usable"), [
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}, "spec": {}}, True),
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]},
      "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]},
      "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]}}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]},
      "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}}, True),
    ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}, "spec": {}}, False),
    ({"metadata": {"name": "no-status-yet"}}, False),
])
def test_a_node_is_usable_once_ready_and_rid_of_the_lifecycle_taints(node, usable):
    from tests.support.rig import load_hack_module

    assert load_hack_module("cluster", "cluster.py").node_usable(node) is usable
