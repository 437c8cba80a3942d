"""Defragmentation: which running gangs move where so a waiting gang that fits by free GPUs, but not by
topology, lands in one domain.

A plan clears one domain of the waiting gang's required tier (without one: the lowest level that can
hold it, as for preemption). The movers are running gangs that allow it (the caller says which: lower
or equal priority, `migratable`, not moved recently), chosen inside the domain as preemption chooses
victims (`preemption.plan_in_domain`: cheapest first until the waiting gang fits there, then any it does
not need dropped); each mover's
ranks inside the domain are then re-homed outside it exactly as a restart would re-home lost ranks
(`replace.solve_replacement`: the others keep their nodes), one mover after another, each taking the
GPUs the earlier ones took. A plan whose movers cannot all be re-homed is no plan. Among domains (tried
in order of an estimate, at most `max_domains` solved) the one with the fewest movers, then the least
work lost, wins. Pure: the operator carries a plan out with checkpoint-then-restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from railyard.topology.cluster.model import GpuNode, Snapshot
from railyard.topology.cluster.node_rules import template_eligible
from railyard.topology.solver.placement import Placement, solve
from railyard.topology.solver.replace import RankSlot, Replacement, solve_replacement
from railyard.topology.solver.request import GangRequest
from railyard.topology.solver.victims import Decide, RunningGang, search, sufficient_prefix
from railyard.topology.solver.victims import plan_in_domain as preemption_in_domain


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
                   movers: Sequence[Mover], decide: Decide = solve) -> tuple[tuple[Move, ...], Placement, float] | None:
    """The fewest, cheapest movers out of `nodes` after which the gang fits there (chosen as preemption
    chooses victims), their moves, where it lands, the work they lose; None if one cannot be re-homed."""
    found = preemption_in_domain(snapshot, request, nodes, [m.gang for m in movers], decide)
    if found is None:
        return None
    by_key = {m.gang.key: m for m in movers}
    chosen = [by_key[g.key] for g in found[0]]
    # Outside the domain a mover's other ranks keep their nodes and GPUs (still used in the snapshot).
    rehomed = _rehome(snapshot.without_nodes(nodes), chosen, nodes, {n.name: n for n in snapshot.nodes})
    if rehomed is None:
        return None
    return tuple(rehomed[0]), found[1], sum(m.gang.lost_gpu_seconds for m in chosen)


def plan_migration(snapshot: Snapshot, request: GangRequest, movers: Sequence[Mover],
                   max_domains: int = 4, decide: Decide = solve) -> MigrationPlan | None:
    """The cheapest migration that lets the gang land in one domain, or None."""
    if not movers or not fits_by_gpus(snapshot, request):
        return None
    gangs = [m.gang for m in movers]

    def estimate(nodes: frozenset[str]) -> tuple | None:
        prefix = sufficient_prefix(snapshot, request, nodes, gangs)
        return (len(prefix), sum(g.lost_gpu_seconds for g in prefix)) if prefix is not None else None

    def plan_at(level: str, domain: str, nodes: frozenset[str]) -> MigrationPlan | None:
        found = plan_in_domain(snapshot, request, nodes, movers, decide)
        return MigrationPlan(level, domain, nodes, *found) if found is not None else None

    return search(snapshot, request, estimate, plan_at, lambda plan: plan.cost, max_domains)
