"""Acting as a rank's railyard.worker from a test: the pod's env and a token bound to the pod."""

from __future__ import annotations

from kubernetes import client


def pod_token(core, namespace: str, pod: dict, audience: str = "railyard.dev") -> str:
    """What kubelet projects into the pod: a short-lived token bound to the pod, for our audience."""
    meta = pod["metadata"]
    sa = pod["spec"].get("serviceAccountName") or "default"
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=[audience], expiration_seconds=600,
        bound_object_ref=client.V1BoundObjectReference(kind="Pod", api_version="v1", name=meta["name"],
                                                       uid=meta["uid"])))
    return core.create_namespaced_service_account_token(sa, namespace, request).status.token


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}
