"""Shared fixtures. e2e and integration tests run against the local control plane (started on demand
through hack/cluster.py, left running for the next test run), and against another cluster only when
RAILYARD_E2E_CLUSTER names that cluster's API server: the suite taints nodes NoExecute, lowers their
allocatable and relabels them, so an exported KUBECONFIG alone is never enough (tests/support/target.py)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.support.target import TargetRefused, choose_target

REPO = Path(__file__).resolve().parent.parent


def _kubeconfig() -> str:
    try:
        target = choose_target(os.environ)
    except TargetRefused as e:
        pytest.exit(f"the e2e suite refuses to run: {e}", returncode=2)
    os.environ["KUBECONFIG"] = target.kubeconfig
    if target.local_rig:
        os.environ["RAILYARD_LOCAL_RIG"] = "1"
    else:
        os.environ.pop("RAILYARD_LOCAL_RIG", None)
    return target.kubeconfig


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    return _kubeconfig()


@pytest.fixture(scope="session")
def api_client(kubeconfig: str):
    from kubernetes import client, config

    config.load_kube_config(kubeconfig)
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = 32
    return client.ApiClient(cfg)


@pytest.fixture(scope="session")
def core(api_client):
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture
def namespace(core):
    """A fresh namespace per test, deleted afterwards; waits until it is gone so the next test
    starts with the capacity this one used."""
    from kubernetes import client

    from tests.support.poll import poll

    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except client.ApiException as e:
            return e.status == 404
        return False

    poll(gone, 120, f"namespace {name} deleted")
