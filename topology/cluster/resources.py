"""What a pod requests of a node, counted the way kube-scheduler's NodeResourcesFit counts it.

All values are milli-units (cpu "500m" -> 500, memory "1Gi" -> 1073741824000), so one integer type
covers every resource, extended ones included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from railyard.topology.api.quantity import parse_milli

PODS = "pods"
ONE_POD = 1000


def _container_requests(container: Mapping[str, Any]) -> Counter[str]:
    """Requests, defaulting to limits where a resource has only a limit (the API server's defaulting)."""
    res = container.get("resources") or {}
    limits = res.get("limits") or {}
    requests = res.get("requests") or {}
    out: Counter[str] = Counter()
    for name in {*limits, *requests}:
        raw = requests.get(name, limits.get(name))
        out[name] = parse_milli(raw)
    return out


def _maximum(a: Counter[str], b: Counter[str]) -> Counter[str]:
    return Counter({k: max(a.get(k, 0), b.get(k, 0)) for k in {*a, *b}})


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """The pod's effective request per resource, plus one `pods` slot.

    kube-scheduler: sum of app containers plus restartable (sidecar) init containers, and at least
    what each regular init container needs while it runs (itself plus the sidecars started before
    it); pod overhead on top. Raises ValueError for a malformed quantity.
    """
    if pod_spec.get("initContainers") or pod_spec.get("overhead"):
        return _with_init_containers(pod_spec)
    # Most pods: their containers' sum, without the Counters (the watch reads 100,000 pods at a fresh start).
    out: dict[str, int] = {}
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        limits = res.get("limits") or {}
        requests = res.get("requests") or {}
        for name in {*limits, *requests}:
            out[name] = out.get(name, 0) + parse_milli(requests.get(name, limits.get(name)))
    out[PODS] = ONE_POD
    return {k: v for k, v in out.items() if v > 0}


def _with_init_containers(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for c in pod_spec.get("containers") or []:
        total.update(_container_requests(c))
    sidecars: Counter[str] = Counter()
    init_peak: Counter[str] = Counter()
    for c in pod_spec.get("initContainers") or []:
        need = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            sidecars.update(need)
        else:
            init_peak = _maximum(init_peak, need + sidecars)
    total.update(sidecars)
    total = _maximum(total, init_peak)
    for name, raw in (pod_spec.get("overhead") or {}).items():
        total[name] += parse_milli(raw)
    total[PODS] = ONE_POD
    return {k: v for k, v in total.items() if v}


def replicas_that_fit(allocatable: Mapping[str, int], requested: Mapping[str, int], need: Mapping[str, int],
                      skip: frozenset[str] = frozenset()) -> tuple[int, str | None]:
    """How many more pods needing `need` fit next to `requested`, and the resource that binds first.
    Resources in `skip` (GPUs, accounted by index elsewhere) are ignored. A resource the node does
    not offer at all fits zero pods."""
    best: int | None = None
    binding: str | None = None
    for name, amount in need.items():
        if name in skip or amount <= 0:
            continue
        free = allocatable.get(name, 0) - requested.get(name, 0)
        fit = max(0, free) // amount
        if best is None or fit < best:
            best, binding = fit, name
    return (best if best is not None else 1 << 30), binding
