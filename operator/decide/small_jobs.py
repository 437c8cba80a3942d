"""Small jobs past starvation reservations (RAILYARD_SMALL_JOB_GPUS, docs/placement.md#small-jobs-and-reservations):
which reserved nodes a job without a declared limit may use because it is small. A holder waits for every one of
its nodes to empty; a small job on one of them delays the holder only if it outlives the occupants of all the
others that are still busy, so a job of at most the set number of GPUs may use a holder's nodes while an eighth of
them or more are busy. Off (0) by default: then only backfill by declared limits (decide/backfill.py) opens a
reservation. Pure: the queue pass (decide/pass_plan.py) asks."""

from __future__ import annotations

from collections.abc import Mapping

from railyard.operator.base.objects import Key
from railyard.topology.cluster.model import Snapshot
from railyard.topology.solver.request import GangRequest

BUSY_SHARE = 8  # a holder's nodes stay open to small jobs while at least 1/BUSY_SHARE of them are busy


def asks_gpus(request: GangRequest) -> int:
    """The GPUs a gang asks at its largest (an elastic gang may be placed above its smallest size)."""
    return request.replicas * request.gpus_per_replica


def open_to_small(request: GangRequest, own: Key, held: Mapping[Key, frozenset[str]], snapshot: Snapshot,
                  small_job_gpus: int) -> frozenset[str]:
    """The nodes of other gangs' reservations a job of `request` may use as a small job (none when it is not one)."""
    if small_job_gpus <= 0 or asks_gpus(request) > small_job_gpus:
        return frozenset()
    opened: set[str] = set()
    for holder, nodes in held.items():
        if holder == own:
            continue
        busy = sum(1 for name in nodes if snapshot.has_node(name) and _busy(snapshot, name))
        if busy * BUSY_SHARE >= len(nodes):
            opened |= nodes
    return frozenset(opened)


def _busy(snapshot: Snapshot, name: str) -> bool:
    node = snapshot.node(name)
    return len(snapshot.free(node)) < node.gpu_count
