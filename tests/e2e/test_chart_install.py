"""The chart installed into the cluster under test: its objects exist, the operator Deployment's pod
runs (simulated by kwok on the local rig), and the ServiceAccount is refused what the operator never
does. (That the RBAC is *enough* is proved by every other operator e2e test: they run as this account.)"""

from __future__ import annotations

import pytest
from kubernetes import client, config

from tests.support.identity import FULLNAME, NAMESPACE
from tests.support.jobs import make_job
from tests.support.poll import poll

pytestmark = pytest.mark.e2e


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
