"""Defragmentation: which running gangs move where so a waiting gang that fits by free GPUs, but not by
topology, lands in one domain.

A plan clears one domain of the waiting gang's required tier (without one: the lowest level that can
hold it, as for preemption). The movers are running gangs that allow it (the caller says which: lower
or equal priority, `migratable`, not moved recently), taken from inside the domain cheapest first (least
work lost since their last checkpoint, then smaller) until the waiting gang fits there; each mover's
ranks inside the domain are then re-homed outside it exactly as a restart would re-home lost ranks
(`replace.solve_replacement`: the others keep their nodes), one mover after another, each taking the
GPUs the earlier ones took. A plan whose movers cannot all be re-homed is no plan. Among domains (tried
in order of an estimate, at most `max_domains` solved) the one with the fewest movers, then the least
work lost, wins. Pure: the operator carries a plan out with checkpoint-then-restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from railyard.topology.levels import NODE
from railyard.topology.model import GpuNode, Snapshot
from railyard.topology.preemption import RunningGang, enough, scopes, sufficient_prefix, victim_order
from railyard.topology.replace import RankSlot, Replacement, solve_replacement
from railyard.topology.request import GangRequest
from railyard.topology.solver import Placement, solve, template_eligible


@dataclass(frozen=True)
class Mover:
    gang: RunningGang  # slots in rank order
    request: GangRequest  # how it was placed (required tier, rails, template)


@dataclass(frozen=True)
class Move:
    key: str
    leaves: tuple[str, ...]  # its nodes inside the cleared domain
    replacements: tuple[Replacement, ...]


@dataclass(frozen=True)
class MigrationPlan:
    level: str
    domain: str
    nodes: frozenset[str]
    moves: tuple[Move, ...]
    placement: Placement  # where the waiting gang lands once they have moved
    lost_gpu_seconds: float

    @property
    def cost(self) -> tuple[int, float]:
        return (len(self.moves), self.lost_gpu_seconds)


def fits_by_gpus(snapshot: Snapshot, request: GangRequest) -> bool:
    """Enough free GPUs on the nodes the gang may use (what topology then refuses, moves may give)."""
    eligible = template_eligible(snapshot, request)
    free = sum(len(snapshot.free(n)) for n in snapshot.nodes if n.name in eligible)
    return free >= request.smallest * request.gpus_per_replica


def _rehome(outside: Snapshot, movers: Sequence[Mover], nodes: frozenset[str],
            models: Mapping[str, GpuNode]) -> tuple[list[Move], Snapshot] | None:
    """Each mover's ranks inside the domain re-homed outside it, in turn; None if one cannot be."""
    moves: list[Move] = []
    current = outside
    for mover in sorted(movers, key=lambda m: -m.gang.gpus):  # the largest first: it has the fewest options
        slots = [RankSlot(rank, node, gpus) for rank, (node, gpus) in enumerate(mover.gang.slots)]
        keep = [s for s in slots if s.node not in nodes]
        lost = [s for s in slots if s.node in nodes]
        lost_models = {s.node: models[s.node] for s in lost}
        decision = solve_replacement(current, mover.request, keep, lost, lost_models)
        if not decision.found:
            return None
        current = current.allocate([(r.new, r.gpus) for r in decision.replacements], mover.request.resources)
        moves.append(Move(mover.gang.key, tuple(sorted({s.node for s in lost})), decision.replacements))
    return moves, current


def plan_in_domain(snapshot: Snapshot, request: GangRequest, nodes: frozenset[str],
                   movers: Sequence[Mover]) -> tuple[tuple[Move, ...], Placement, float] | None:
    """The fewest, cheapest movers out of `nodes` after which the gang fits there: their moves, where
    it lands, the work they lose."""
    domain = snapshot.only_nodes(nodes)
    inside = sorted((m for m in movers if m.gang.nodes & nodes), key=lambda m: victim_order(m.gang))
    chosen: list[Mover] = []
    placement: Placement | None = None
    for mover in inside:
        chosen.append(mover)
        if not enough(domain, request, nodes, [m.gang for m in chosen]):
            continue
        freed = domain
        for m in chosen:
            freed = freed.release(m.gang.slots, m.gang.requests)
        placement = solve(freed, request).placement
        if placement is not None:
            break
    if placement is None:
        return None
    # Outside the domain a mover's other ranks keep their nodes and GPUs (still used in the snapshot).
    rehomed = _rehome(snapshot.without_nodes(nodes), chosen, nodes, {n.name: n for n in snapshot.nodes})
    if rehomed is None:
        return None
    return tuple(rehomed[0]), placement, sum(m.gang.lost_gpu_seconds for m in chosen)


def plan_migration(snapshot: Snapshot, request: GangRequest, movers: Sequence[Mover],
                   max_domains: int = 4) -> MigrationPlan | None:
    """The cheapest migration that lets the gang land in one domain, or None."""
    if not movers or not fits_by_gpus(snapshot, request):
        return None
    gangs = [m.gang for m in movers]
    for level, domains in scopes(snapshot, request):
        if level == NODE and request.replicas > 1:
            continue
        estimates = sorted((len(prefix), sum(g.lost_gpu_seconds for g in prefix), domain)
                           for domain, nodes in domains.items()
                           if (prefix := sufficient_prefix(snapshot, request, nodes, gangs)) is not None)
        best: MigrationPlan | None = None
        for _, _, domain in estimates[:max_domains]:
            found = plan_in_domain(snapshot, request, domains[domain], movers)
            if found is None:
                continue
            plan = MigrationPlan(level, domain, domains[domain], *found)
            if best is None or (plan.cost, plan.domain) < (best.cost, best.domain):
                best = plan
        if best is not None:
            return best
    return None
