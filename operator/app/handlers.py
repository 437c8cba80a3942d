"""Kopf wiring. Kopf runs the process: startup and cleanup, the liveness probe, the memo that carries
the operator's parts. The cluster view comes from Railyard's own reflectors (see reflector.py for
why not Kopf's watches); one background loop (act/loop.py) places, on the leader only.

Nothing here writes to objects Railyard does not own: there are no resource handlers, so Kopf adds
no finalizers or annotations to Pods and Nodes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import Any

import kopf
from railyard.operator.act.loop import PlacementLoop
from railyard.operator.base import metrics
from railyard.operator.base.keys import ANNOTATION_LABEL_PRESET, ANNOTATION_TOPOLOGY_LEVELS
from railyard.operator.base.settings import DraMode, Settings
from railyard.operator.cache.device_book import SLICES
from railyard.operator.cache.evictions import EvictionBook
from railyard.operator.cache.progress_book import ProgressBook
from railyard.operator.cache.state import ClusterState
from railyard.operator.kube.client import ApiException, KubeApi
from railyard.operator.kube.leader import LeaderElector
from railyard.operator.kube.leader_label import LeaderLabel
from railyard.operator.kube.reflector import PATHS, Reflector, reflector_sink
from railyard.operator.kube.report_server import ReportServer
from railyard.topology.cluster.labels import scheme_for

log = logging.getLogger("railyard.operator")
FIRST_ELECTION_SECONDS = 10.0  # at most this long before listing anyway (an API server slow to answer)


def new_memo(settings: Settings | None = None) -> kopf.Memo:
    return kopf.Memo(settings=settings or Settings.from_env())


@kopf.on.startup()
async def startup(memo: kopf.Memo, settings: kopf.OperatorSettings, **_: Any) -> None:
    config: Settings = memo.settings
    settings.posting.level = logging.WARNING
    # No Kopf resource handlers: nothing to discover, so no need to list CRDs and namespaces (RBAC).
    settings.scanning.disabled = True
    agent = f"railyard-operator/{config.leader.identity}"
    api = KubeApi(workers=config.api.workers, user_agent=agent)
    loop = asyncio.get_running_loop()
    sink_target: list[PlacementLoop] = []  # the loop, once built: what reflectors and the elector wake
    # The elector has its own client, pool, thread and event loop: renewal never waits behind
    # placement writes or a long solve on this loop.
    lease_api = KubeApi(workers=2, user_agent=agent, read_timeout=5)
    label = LeaderLabel(lease_api, config.leader.pod_namespace, config.leader.pod_name)
    leader = LeaderElector(lease_api, config.leader,
                           on_elected=lambda: loop.call_soon_threadsafe(lambda: sink_target[0].wake()),
                           on_change=label.mark if label.enabled else None,
                           annotations={ANNOTATION_LABEL_PRESET: config.placement.label_preset,
                                        ANNOTATION_TOPOLOGY_LEVELS: config.placement.topology_levels})
    api.fence = leader.is_leader  # no write leaves this replica after its term ended
    state = ClusterState(scheme_for(config.placement.label_preset, config.placement.topology_levels),
                         device_names=config.dra.names if _reads_devices(api, config) else None,
                         dra_required=config.dra.mode == DraMode.ON)
    book = ProgressBook()
    delays = {"pods": config.test_pod_watch_delay}
    reflectors = [Reflector(KubeApi(workers=1, user_agent=agent, read_timeout=60), kind,
                            reflector_sink(state, lambda: sink_target[0].wake()), loop,
                            delay_events=delays.get(kind, 0.0)) for kind in state.kinds]

    async def catch_up() -> None:
        """A new leader's view passes a fresh quorum read of every kind before it places. Each kind's is checked
        once that kind's first list is in: a fresh operator's small kinds (their 2 s wait and re-list) then overlap
        the pods' stream instead of following it."""
        async def one(reflector: Reflector) -> str:
            while reflector.kind not in state.synced:
                await asyncio.sleep(0.05)
            return await loop.run_in_executor(None, partial(reflector.catch_up, term_began=leader.term_began))

        how = await asyncio.gather(*(one(r) for r in reflectors))
        log.info("caught up before placing: %s", dict(zip(state.kinds, how, strict=True)))

    evictions = EvictionBook()  # the report endpoint's eviction webhook notes drains; the loop acts on them
    loop_ = PlacementLoop(state, api, config, leader.is_leader, book, catch_up=catch_up, evictions=evictions)
    sink_target.append(loop_)
    reports = ReportServer(state, book, KubeApi(workers=4, user_agent=agent, read_timeout=10), config.reports,
                           leader.is_leader, evictions=evictions,
                           hold_seconds=config.maintenance.checkpoint_seconds)
    # The first election attempt before the first lists: a replica that leads at once lists in its term, and those
    # lists are its fresh quorum read (catch_up needs no more: a fresh operator lists nothing twice).
    leader.start()
    await loop.run_in_executor(None, leader.first_attempt.wait, FIRST_ELECTION_SECONDS)
    for r in reflectors:
        r.start()
    metrics.serve(config.metrics.port)
    reports.start()
    memo.update(api=api, leader=leader, state=state, loop=loop_, reflectors=reflectors, reports=reports,
                tasks=[asyncio.create_task(loop_.run(), name="railyard-placer"),
                       asyncio.create_task(_measure_lag(), name="railyard-lag")])
    log.info("railyard operator started as %s", config.leader.identity)


def _reads_devices(api: KubeApi, config: Settings) -> bool:
    """Whether to read ResourceSlices and ResourceClaims: unless RAILYARD_DRA=off, when the API server
    serves them to this account. RAILYARD_DRA=on and they cannot be read: the operator stops, saying why."""
    if config.dra.mode == DraMode.OFF:
        return False
    try:
        api.request("GET", PATHS[SLICES], query=[("limit", "1")], timeout=30)
        return True
    except ApiException as e:
        if config.dra.mode == DraMode.ON:
            raise RuntimeError(f"RAILYARD_DRA=on but ResourceSlices cannot be listed: HTTP {e.status} {e.reason}") \
                from None
        log.warning("DRA off: ResourceSlices cannot be listed (HTTP %s %s); GPUs are the device plugin's",
                    e.status, e.reason)
        return False


async def _measure_lag(period: float = 0.1) -> None:
    """How late the event loop wakes a 100 ms timer: the cost of long synchronous steps."""
    while True:
        started = time.perf_counter()
        await asyncio.sleep(period)
        metrics.LOOP_LAG_SECONDS.observe(max(0.0, time.perf_counter() - started - period))


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    for task in memo.get("tasks", []):
        task.cancel()
    placement: PlacementLoop | None = memo.get("loop")
    if placement is not None:
        placement.stop()
    for r in memo.get("reflectors", []):
        r.stop()
    reports: ReportServer | None = memo.get("reports")
    if reports is not None:
        reports.stop()
    leader: LeaderElector | None = memo.get("leader")
    api: KubeApi | None = memo.get("api")
    if leader is not None:
        leader.stop()
        if api is not None:  # what this replica sent lands before a successor may start
            left = await api.drain(10.0)
            if left:
                log.warning("%d writes still in flight after 10 s; releasing the Lease anyway (fenced)", left)
        await leader.release()
    if api is not None:
        await api.aclose()


@kopf.on.probe(id="placementLoop")
def placement_loop(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    """Liveness: fails (HTTP 500) when the placement loop has not turned for `stall_seconds`."""
    placement: PlacementLoop | None = memo.get("loop")
    if placement is None:
        return {"started": False}
    idle = time.monotonic() - placement.last_iteration
    if idle > memo.settings.health.stall_seconds:
        raise kopf.PermanentError(f"placement loop stalled for {idle:.0f}s")
    return {"idleSeconds": round(idle, 1), "iterations": placement.iterations}


@kopf.on.probe(id="state")
def state_probe(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    """Readiness facts: listed kinds, leadership."""
    state: ClusterState | None = memo.get("state")
    leader: LeaderElector | None = memo.get("leader")
    return {"synced": sorted(state.synced) if state else [], "ready": bool(state and state.ready),
            "leader": bool(leader and leader.is_leader())}
