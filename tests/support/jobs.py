"""Building TrainingJobs and reading their outcome back from the API."""

from __future__ import annotations

from typing import Any

from railyard.topology.api.job import GROUP, PLURAL, VERSION

from tests.support.poll import poll


def make_job(name: str, replicas: int, gpus: int = 8, topology: dict | None = None,
             parallelism: dict | None = None, annotations: dict | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {"replicas": replicas, **spec, "template": {
            "metadata": {"annotations": annotations or {}},
            "spec": {"containers": [{"name": "trainer", "image": "registry.invalid/trainer:0",
                                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
        }},
    }
    if topology:
        body["spec"]["topology"] = topology
    if parallelism:
        body["spec"]["parallelism"] = parallelism
    return body


TOR_LABEL = "topology.railyard.dev/tor"


def on_nodes(body: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    """The job with its template's nodeSelector set."""
    body["spec"]["template"]["spec"]["nodeSelector"] = selector
    return body


def pinned(name: str, replicas: int, tor: str, **spec: Any) -> dict[str, Any]:
    """A job whose pods may only use one TOR's nodes."""
    return on_nodes(make_job(name, replicas, **spec), {TOR_LABEL: tor})


def create_job(custom, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def get_job(custom, namespace: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def delete_job(custom, namespace: str, name: str) -> None:
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def wait_condition(custom, namespace: str, name: str, type_: str, status: str = "True", reason: str | None = None,
                   timeout: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job = get_job(custom, namespace, name)
        c = condition(job, type_)
        if c and c["status"] == status and (reason is None or c.get("reason") == reason):
            return job
        return None

    return poll(check, timeout, f"{namespace}/{name} {type_}={status} {reason or ''}")


def pods_of(api_client, core, namespace: str, name: str) -> list[dict[str, Any]]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"railyard.dev/job-name={name}").items
    return sorted(api_client.sanitize_for_serialization(pods),
                  key=lambda p: int(p["metadata"]["labels"]["railyard.dev/rank"]))


def wait_bound(api_client, core, namespace: str, name: str, replicas: int, timeout: float = 60) -> list[dict]:
    def check() -> list[dict] | None:
        pods = pods_of(api_client, core, namespace, name)
        if len(pods) == replicas and all(p["spec"].get("nodeName") for p in pods):
            return pods
        return None

    return poll(check, timeout, f"{replicas} bound pods of {namespace}/{name}")


def gpus_of(pod: dict[str, Any]) -> list[int]:
    return [int(g) for g in pod["metadata"]["annotations"]["railyard.dev/gpus"].split(",")]


def placeable_nodes(core) -> list[Any]:
    """Nodes a plain TrainingJob can land on: a TOR label, schedulable, and no NoSchedule/NoExecute taint (the
    rig's real node is tainted so only pods meant for it go there)."""
    return [n for n in core.list_node().items
            if "topology.railyard.dev/tor" in (n.metadata.labels or {}) and not n.spec.unschedulable
            and not any(t.effect in ("NoSchedule", "NoExecute") for t in n.spec.taints or [])]


def placeable_by_tor(core) -> dict[str, list[str]]:
    """The placeable nodes' names, by TOR."""
    out: dict[str, list[str]] = {}
    for node in placeable_nodes(core):
        out.setdefault(node.metadata.labels[TOR_LABEL], []).append(node.metadata.name)
    return out
