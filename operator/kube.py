"""Small synchronous helpers over the official Kubernetes client (CLI use)."""

from __future__ import annotations

from typing import Any


def list_nodes_and_pods(kubeconfig: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api)
    nodes = api.sanitize_for_serialization(core.list_node().items)
    pods = api.sanitize_for_serialization(
        core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed").items
    )
    return nodes, pods
