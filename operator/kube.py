"""Small synchronous helpers over the official Kubernetes client (CLI use)."""

from __future__ import annotations

from typing import Any

from railyard.operator.state import placement_reservations
from railyard.topology.api import GROUP, PLURAL, VERSION


def list_nodes_and_pods(kubeconfig: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api)
    nodes = api.sanitize_for_serialization(core.list_node().items)
    pods = api.sanitize_for_serialization(
        core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed").items
    )
    # Placements recorded by the operator hold their GPUs even before their pods exist.
    try:
        jobs = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    except client.ApiException as e:
        if e.status != 404:  # no CRD installed: no reservations
            raise
        jobs = []
    return nodes, pods + list(placement_reservations(jobs))
