"""The pending-job queue: priority, then age; and the rule that keeps large gangs from starving.

Rule (documented in the README):
- Jobs are tried in order of priority (higher first), then queuedSince (older first), then name.
- A job that does not fit does not block the jobs behind it (backfill), until it has waited
  `starvationSeconds`. From then on it *reserves* the domain it is waiting for: the domain of its
  required tier with the most free capacity, or the whole cluster without a required tier. Jobs behind
  it may only use nodes outside that domain, so capacity freed inside it accumulates until it fits.
- One reservation at a time: the first starving job in queue order holds it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from railyard.topology.model import Snapshot
from railyard.topology.request import GangRequest


@dataclass(frozen=True)
class QueuedJob:
    key: tuple[str, str]
    priority: int
    queued_since: float  # epoch seconds
    request: GangRequest
    avoid: frozenset[str] = frozenset()  # nodes this job may not use for now (bind failures)


def order(jobs: list[QueuedJob]) -> list[QueuedJob]:
    return sorted(jobs, key=lambda j: (-j.priority, j.queued_since, j.key))


def reserved_nodes(job: QueuedJob, snapshot: Snapshot) -> frozenset[str]:
    """The nodes of the domain a starving job waits for."""
    request = job.request
    if request.required_tier is None:
        return frozenset(n.name for n in snapshot.nodes)
    levels = snapshot.levels
    level = levels.index(request.required_tier)
    size = max(1, request.gpus_per_replica)
    capacity: Counter[str] = Counter()
    for node in snapshot.nodes:
        capacity[levels.domain_of(node, level)] += len(snapshot.free(node)) // size
    if not capacity:
        return frozenset()
    domain = min(capacity, key=lambda d: (-capacity[d], d))
    return frozenset(n.name for n in snapshot.nodes if levels.domain_of(n, level) == domain)
