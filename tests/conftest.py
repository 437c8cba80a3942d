"""Shared fixtures. e2e/integration tests use $KUBECONFIG when set, else the local control plane
(started on demand through hack/cluster.py, left running for the next test run)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _kubeconfig() -> str:
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"]
    subprocess.run([sys.executable, str(REPO / "hack" / "cluster.py"), "up", "--profile", "small"], check=True)
    out = subprocess.run([sys.executable, str(REPO / "hack" / "cluster.py"), "kubeconfig"], check=True,
                         capture_output=True, text=True)
    os.environ["KUBECONFIG"] = out.stdout.strip()
    os.environ["RAILYARD_LOCAL_RIG"] = "1"
    return os.environ["KUBECONFIG"]


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
