"""Fixtures for operator e2e tests: the CRD installed, the operator running, helpers to read
placements back from the API (never from the operator's own status)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.e2e.test_control_plane import apply_crds
from tests.support.identity import Identity, install, uninstall
from tests.support.operator import OperatorProcess, wait_for_leader
from tests.support.poll import poll
from tests.support.rig import rig_binary


@pytest.fixture(scope="session")
def crds(api_client) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    for name in apply_crds(api_client):
        poll(lambda n=name: any(c.type == "Established" and c.status == "True"
                                for c in ext.read_custom_resource_definition(n).status.conditions or []),
             30, f"CRD {name} Established")


@pytest.fixture(scope="session")
def identity(kubeconfig, crds, tmp_path_factory) -> Iterator[Identity]:
    """Operators in e2e tests run as the Helm chart's ServiceAccount (installed here)."""
    helm = str(rig_binary("helm"))
    ident = install(helm, kubeconfig, tmp_path_factory.mktemp("identity"))
    yield ident
    uninstall(helm, kubeconfig)


@pytest.fixture(scope="session")
def custom(api_client):
    return client.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def coordination(api_client):
    return client.CoordinationV1Api(api_client)


@pytest.fixture
def lease_namespace(core) -> Iterator[str]:
    name = f"railyard-e2e-{uuid.uuid4().hex[:6]}"
    yield name
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(name)


@pytest.fixture
def tenant(core) -> Iterator[str]:
    """Another tenant's namespace (deleted after the test)."""
    name = f"tenant-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(name)


@pytest.fixture(scope="module")
def operator(identity, crds, core, coordination, tmp_path_factory) -> Iterator[OperatorProcess]:
    lease_ns = f"railyard-e2e-{uuid.uuid4().hex[:6]}"
    proc = OperatorProcess(identity, lease_ns, tmp_path_factory.mktemp("operator"))
    try:
        wait_for_leader(coordination, lease_ns)
        yield proc
    finally:
        proc.stop()
        print(proc.log_tail(20))
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(lease_ns)
    # It ran as the chart's ServiceAccount: any refusal means the chart's RBAC is short of a verb.
    refused = [line for line in proc.log_path.read_text(errors="replace").splitlines()
               if "Forbidden" in line and "because it is being terminated" not in line]
    assert not refused, f"the chart's RBAC refused the operator: {refused[:3]}"
