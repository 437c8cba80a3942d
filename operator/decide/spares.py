"""Hot spares: whole free nodes kept per TOR for replacements (RAILYARD_SPARES_PER_TOR).

First placements do not use a TOR's last N wholly free nodes (jobs with spec.preemption.backfillSpares
may); replacements and restarts see every free node, so a lost rank finds a spare in its own TOR. The
spares are whichever nodes are wholly free, not fixed ones: the highest-named, so gangs pack from the
other end. A TOR with fewer than N wholly free nodes keeps them all and counts as short of spares.
"""

from __future__ import annotations

from collections.abc import Iterable

from railyard.topology.cluster.model import Snapshot


def spare_nodes(snapshot: Snapshot, per_tor: int) -> frozenset[str]:
    """The nodes kept free as spares: up to `per_tor` wholly free nodes in each TOR."""
    if per_tor <= 0:
        return frozenset()
    free: dict[str, list[str]] = {}
    for node in snapshot.nodes:
        if node.gpu_count and len(snapshot.free(node)) == node.gpu_count and not snapshot.requested_on(node.name):
            free.setdefault(node.tor, []).append(node.name)
    return frozenset(name for names in free.values() for name in sorted(names)[-per_tor:])


def tors_short(snapshot: Snapshot, per_tor: int, backfilled: Iterable[str] = ()) -> int:
    """TORs with fewer than `per_tor` spares (wholly free, or lent to backfilling jobs)."""
    if per_tor <= 0:
        return 0
    counts: dict[str, int] = {node.tor: 0 for node in snapshot.nodes}
    lent = set(backfilled)
    for node in snapshot.nodes:
        if node.name in lent or (len(snapshot.free(node)) == node.gpu_count and node.gpu_count):
            counts[node.tor] += 1
    return sum(1 for count in counts.values() if count < per_tor)
