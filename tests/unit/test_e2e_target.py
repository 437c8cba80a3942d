"""The e2e suite touches the local rig, or a cluster named by RAILYARD_E2E_CLUSTER, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.target import OPT_IN, TargetRefused, choose_target, rig_kubeconfig


def _kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "prod",
        "contexts": [{"name": "prod", "context": {"cluster": "prod-cluster", "user": "me"}},
                     {"name": "other", "context": {"cluster": "other-cluster", "user": "me"}}],
        "clusters": [{"name": "other-cluster", "cluster": {"server": "https://other:6443"}},
                     {"name": "prod-cluster", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {}}]}))
    return str(path)


def test_an_exported_kubeconfig_alone_is_refused_naming_its_server_and_the_opt_in(tmp_path):
    env = {"KUBECONFIG": _kubeconfig(tmp_path, "https://prod.example:6443")}
    with pytest.raises(TargetRefused, match=rf"https://prod.example:6443.*{OPT_IN}=https://prod.example:6443"):
        choose_target(env, start_rig=False)


def test_the_opt_in_must_name_the_current_contexts_server(tmp_path):
    env = {"KUBECONFIG": _kubeconfig(tmp_path, "https://prod.example:6443"), OPT_IN: "https://other:6443"}
    with pytest.raises(TargetRefused, match="must name the same API server"):
        choose_target(env, start_rig=False)
    with pytest.raises(TargetRefused, match="KUBECONFIG is not set"):
        choose_target({OPT_IN: "https://prod.example:6443"}, start_rig=False)


def test_a_named_cluster_is_used_and_is_not_the_rig(tmp_path):
    kubeconfig = _kubeconfig(tmp_path, "https://prod.example:6443/")
    target = choose_target({"KUBECONFIG": kubeconfig, OPT_IN: "https://prod.example:6443"}, start_rig=False)
    assert target.kubeconfig == kubeconfig and not target.local_rig


def test_without_kubeconfig_or_with_the_rigs_own_it_is_the_local_rig():
    assert choose_target({}, start_rig=False).local_rig
    rig = str(rig_kubeconfig())
    assert choose_target({"KUBECONFIG": rig}, start_rig=False) == choose_target({}, start_rig=False)
