"""The identity e2e operator processes run as: the Helm chart's ServiceAccount, installed into the
cluster under test, so every e2e test of the operator also proves the chart's RBAC is enough."""

from __future__ import annotations

import copy
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RELEASE = "railyard-e2e"
NAMESPACE = "railyard-e2e"
FULLNAME = f"{RELEASE}-railyard"  # charts/railyard/templates/_helpers.tpl
LEADER_ROLE, LEASE_NAMESPACE = "railyard-leader-election", "kube-system"  # the chart's defaults
# The rig's image name (hack/images.py reference): the chart has no default repository.
IMAGE_REPOSITORY = "localhost/railyard"


@dataclass
class Identity:
    admin_kubeconfig: str
    kubeconfig: str  # the ServiceAccount's token
    leader_role: dict[str, Any]  # the chart's Role for leases, to grant in other lease namespaces
    notes: str  # what `helm install` printed

    def prepare(self, namespace: str) -> None:
        """Create the lease namespace and grant the chart's lease Role there (the operator creates no
        namespaces, and the chart's Role lives in the cluster's one lease namespace)."""
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=self.admin_kubeconfig)
        core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        role = copy.deepcopy(self.leader_role)
        role["metadata"] = {"name": role["metadata"]["name"], "namespace": namespace}
        binding = {"metadata": {"name": role["metadata"]["name"], "namespace": namespace},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                               "name": role["metadata"]["name"]},
                   "subjects": [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]}
        for create, args in ((core.create_namespace, ({"metadata": {"name": namespace}},)),
                             (rbac.create_namespaced_role, (namespace, role)),
                             (rbac.create_namespaced_role_binding, (namespace, binding))):
            try:
                create(*args)
            except client.ApiException as e:
                if e.status != 409:
                    raise


def install(helm: str, admin_kubeconfig: str, workdir: Path) -> Identity:
    """helm install the chart (CRD left to the test fixtures, one simulated replica), then a
    kubeconfig with a token of the chart's ServiceAccount."""
    from kubernetes import client, config

    run = subprocess.run([helm, "upgrade", "--install", RELEASE, str(REPO / "charts" / "railyard"), "-n", NAMESPACE,
                          "--create-namespace", "--kubeconfig", admin_kubeconfig, "--set", "crds.install=false",
                          "--set", "replicaCount=1", "--set", f"image.repository={IMAGE_REPOSITORY}",
                          # No operator pod runs from this release: its pod webhook (fails closed) would refuse every
                          # opted-in pod; tests that need it register their own operator's, as the chart does.
                          "--set", "workloads.podWebhook.enabled=false"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    api = config.new_client_from_config(config_file=admin_kubeconfig)
    path = workdir / "railyard-sa.kubeconfig"
    service_account_kubeconfig(admin_kubeconfig, NAMESPACE, FULLNAME, path)
    # The chart's lease Role (one per cluster, in leaderElection.namespace); each test's operator gets a
    # copy in its own lease namespace, so operators of different tests never share a Lease.
    role = client.RbacAuthorizationV1Api(api).read_namespaced_role(LEADER_ROLE, LEASE_NAMESPACE)
    return Identity(admin_kubeconfig, str(path), api.sanitize_for_serialization(role), run.stdout)


def service_account_kubeconfig(admin_kubeconfig: str, namespace: str, name: str, path: Path) -> str:
    """A kubeconfig with a fresh token of ServiceAccount namespace/name, on the admin's cluster."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=admin_kubeconfig)
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=7200))
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request).status
    assert answer is not None, "the API server issued no token"
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin.get("current-context")) \
        if admin.get("current-context") else admin["contexts"][0]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "c", "cluster": cluster["cluster"]}],
        "users": [{"name": name, "user": {"token": answer.token}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": name, "namespace": namespace}}],
    }))
    return str(path)


def uninstall(helm: str, admin_kubeconfig: str) -> None:
    subprocess.run([helm, "uninstall", RELEASE, "-n", NAMESPACE, "--kubeconfig", admin_kubeconfig],
                   capture_output=True, text=True)
