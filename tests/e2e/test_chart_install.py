"""The chart installed into the cluster under test: its objects exist, the operator Deployment's pod
runs (simulated by kwok on the local rig), and the ServiceAccount is refused what the operator never
does. (That the RBAC is *enough* is proved by every other operator e2e test: they run as this account.)"""

from __future__ import annotations

import pytest
from kubernetes import client, config

from tests.support.identity import FULLNAME, LEASE_NAMESPACE, NAMESPACE, service_account_kubeconfig
from tests.support.jobs import make_job
from tests.support.poll import poll

pytestmark = pytest.mark.e2e


def test_the_notes_check_the_lease_where_it_lives(identity):
    assert f"kubectl -n {LEASE_NAMESPACE} get lease railyard-operator" in identity.notes, identity.notes


@pytest.mark.parametrize(("role", "may_create"), [("edit", True), ("admin", True), ("view", False)])
def test_tenants_use_trainingjobs_through_the_built_in_roles_with_no_rbac_of_their_own(
        identity, crds, core, custom, namespace, tmp_path, role, may_create):
    """The chart aggregates TrainingJobs into admin/edit/view: a tenant bound to one in their namespace
    needs nothing else (Kubernetes' own aggregation controller fills the roles in)."""
    rbac = client.RbacAuthorizationV1Api(core.api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "tenant"}})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "tenant"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                    "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}]})
    tenant = client.CustomObjectsApi(config.new_client_from_config(
        config_file=service_account_kubeconfig(identity.admin_kubeconfig, namespace, "tenant", tmp_path / "t")))

    def create() -> bool:
        try:
            tenant.create_namespaced_custom_object("railyard.dev", "v1alpha1", namespace, "trainingjobs",
                                                   make_job("tenants", 1))
            return True
        except client.ApiException as e:
            assert e.status == 403, e.body
            return False

    if may_create:  # the aggregation controller fills the built-in role in shortly after the chart's install
        poll(create, 30, f"a tenant bound to {role} creates a TrainingJob")
        tenant.patch_namespaced_custom_object_scale("railyard.dev", "v1alpha1", namespace, "trainingjobs", "tenants",
                                                    {"spec": {"replicas": 1}})
    else:
        custom.create_namespaced_custom_object("railyard.dev", "v1alpha1", namespace, "trainingjobs",
                                               make_job("tenants", 1))
        assert not create()
    poll(lambda: tenant.list_namespaced_custom_object("railyard.dev", "v1alpha1", namespace, "trainingjobs")
         ["items"] != [], 30, f"a tenant bound to {role} lists TrainingJobs")


def test_the_release_runs_its_operator_deployment(identity, api_client):
    apps = client.AppsV1Api(api_client)
    deploy = apps.read_namespaced_deployment(FULLNAME, NAMESPACE)
    assert deploy.spec.template.spec.service_account_name == FULLNAME
    poll(lambda: (apps.read_namespaced_deployment(FULLNAME, NAMESPACE).status.available_replicas or 0) >= 1, 60,
         "the operator Deployment available")


@pytest.mark.parametrize("attempt", ["create namespace", "update a TrainingJob's spec", "delete a node",
                                     "list secrets", "create a lease outside its namespace"])
def test_the_service_account_is_refused_what_the_operator_never_does(identity, crds, core, custom, namespace,
                                                                     attempt):
    sa = config.new_client_from_config(config_file=identity.kubeconfig)
    sa_core, sa_custom = client.CoreV1Api(sa), client.CustomObjectsApi(sa)
    custom.create_namespaced_custom_object("railyard.dev", "v1alpha1", namespace, "trainingjobs", make_job("mine", 1))
    node = core.list_node(limit=1).items[0].metadata.name
    calls = {
        "create namespace": lambda: sa_core.create_namespace({"metadata": {"name": "should-not-exist"}}),
        "update a TrainingJob's spec": lambda: sa_custom.patch_namespaced_custom_object(
            "railyard.dev", "v1alpha1", namespace, "trainingjobs", "mine", {"spec": {"priorityClassName": "x"}}),
        "delete a node": lambda: sa_core.delete_node(node),
        "list secrets": lambda: sa_core.list_namespaced_secret(namespace),
        "create a lease outside its namespace": lambda: client.CoordinationV1Api(sa).create_namespaced_lease(
            namespace, {"metadata": {"name": "x"}, "spec": {"holderIdentity": "x"}}),
    }
    with pytest.raises(client.ApiException) as err:
        calls[attempt]()
    assert err.value.status == 403, err.value.body
