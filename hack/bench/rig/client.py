#!/usr/bin/env python3
"""CPU per API request of the operator's two transports, in the same run against the cluster in
$KUBECONFIG: the async path (aiohttp from the event loop, what the placer uses) against the official
client's thread pool (the sync path, the baseline). Merge-patches ConfigMaps in one namespace from
16 concurrent writers, alternating the two transports over several rounds; prints JSON with the
medians and their ratio. `make client-bench`."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import sys
import time
import uuid

from bench.common import arguments
from railyard.operator.kube.client import ApiException, KubeApi

REQUESTS = int(os.environ.get("CLIENT_BENCH_REQUESTS", "2000"))
ROUNDS = int(os.environ.get("CLIENT_BENCH_ROUNDS", "3"))
WRITERS = 16


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def patches(api: KubeApi, namespace: str, through_pool: bool) -> None:
    async def writer(index: int) -> None:
        path = f"/api/v1/namespaces/{namespace}/configmaps/bench-{index}"
        for value in range(REQUESTS // WRITERS):
            args = ("PATCH", path, {"data": {"k": str(value)}}, "application/merge-patch+json")
            if through_pool:
                await api.run(api.request, *args)
            else:
                await api.arequest(*args)

    await asyncio.gather(*(writer(i) for i in range(WRITERS)))


async def measure(api: KubeApi, namespace: str, through_pool: bool) -> dict[str, float]:
    started_cpu, started = cpu_seconds(), time.monotonic()
    await patches(api, namespace, through_pool)
    cpu, wall = cpu_seconds() - started_cpu, time.monotonic() - started
    sent = REQUESTS // WRITERS * WRITERS
    return {"cpu_ms_per_request": 1000 * cpu / sent, "requests_per_second": sent / wall}


async def compare_transports() -> dict:
    api = KubeApi(workers=24, user_agent="railyard-bench/client")
    namespace = f"client-bench-{uuid.uuid4().hex[:6]}"
    await api.arequest("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    try:
        for i in range(WRITERS):
            await api.arequest("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                               {"metadata": {"name": f"bench-{i}"}, "data": {"k": "0"}})
        await patches(api, namespace, True)  # warm both: connections open, code paths loaded
        await patches(api, namespace, False)
        rounds: dict[str, list[dict[str, float]]] = {"official_client_pool": [], "async_transport": []}
        for _ in range(ROUNDS):
            rounds["official_client_pool"].append(await measure(api, namespace, True))
            rounds["async_transport"].append(await measure(api, namespace, False))
    finally:
        try:
            await api.arequest("DELETE", f"/api/v1/namespaces/{namespace}")
        except ApiException as e:
            print(f"could not delete namespace {namespace}: {e.status}", file=sys.stderr)
        await api.aclose()
    medians = {name: {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}
               for name, runs in rounds.items()}
    return {"requests_per_round": REQUESTS // WRITERS * WRITERS, "writers": WRITERS, "rounds": rounds,
            "median": medians,
            "cpu_ratio_async_over_pool": round(medians["async_transport"]["cpu_ms_per_request"]
                                               / medians["official_client_pool"]["cpu_ms_per_request"], 3)}


def main() -> int:
    arguments(__doc__)
    print(json.dumps(asyncio.run(compare_transports()), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
