"""Who has to go so a waiting gang fits: victims chosen inside one domain, cheapest first.

A pending gang that does not fit may take the place of whole running gangs of lower priority. The
victims all come from one domain of the gang's required tier (without one: the lowest level whose
domains can hold it at all, then the levels above), so evicting them clears that domain instead of
freeing scattered GPUs the gang still cannot use. Among the domains where enough can be freed, the
plan chosen minimises, in this order: the highest priority among its victims, the work they lose
(GPUs x seconds since each victim's last committed checkpoint), and the number of victims.

In a domain, victims are added cheapest first until the gang fits there (solved on the domain alone,
with the victims' GPUs and requests given back), then each victim is dropped again, most costly
first, if the gang still fits without it: no plan evicts a gang it does not need. Pure: the caller
says which gangs may be victims (priority, preemptionPolicy, hourly caps are its business).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from railyard.topology.cluster.levels import NODE
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.node_rules import template_eligible
from railyard.topology.solver.placement import Decision, Placement, solve
from railyard.topology.solver.request import GangRequest

WHOLE_CLUSTER = ""  # the domain id of a plan that is not inside one domain of any level
# Where a gang goes on a snapshot: solve() itself, or the operator's decision function with the pods
# that inter-pod rules read (topology/solver/decision.decide): one rule for every solve.
Decide = Callable[[Snapshot, GangRequest], Decision]


@dataclass(frozen=True)
class RunningGang:
    """A running gang that may be evicted: what it holds and what evicting it would cost."""

    key: str  # namespace/name
    priority: int
    slots: tuple[tuple[str, tuple[int, ...]], ...]  # (node, GPU indices) per rank
    lost_gpu_seconds: float  # GPUs x seconds since its last committed checkpoint
    requests: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)  # per replica
    sizes: tuple[int, ...] = ()  # elastic: the smaller sizes it may run at (valid, >= minReplicas)
    shrink_to: int | None = None  # set on the option "shrink it to this size": `slots` are the ranks it drops

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(node for node, _ in self.slots)

    @property
    def gpus(self) -> int:
        return sum(len(g) for _, g in self.slots)


@dataclass(frozen=True)
class PreemptionPlan:
    level: str  # the level of the domain cleared ("node".. top), or "cluster"
    domain: str  # its id (WHOLE_CLUSTER for the cluster)
    nodes: frozenset[str]  # the domain's nodes: held for the preemptor while the victims go
    victims: tuple[RunningGang, ...]
    placement: Placement  # where the gang lands once they have gone

    @property
    def cost(self) -> tuple[int, float, int]:
        return cost_of(self.victims)

    @property
    def lost_gpu_hours(self) -> float:
        return sum(v.lost_gpu_seconds for v in self.victims) / 3600


def victim_order(gang: RunningGang) -> tuple[int, int, float, int, str]:
    """Cheapest first: lower priority; at one priority an elastic gang shrunk before any gang is evicted
    whole; then less work lost, then larger (fewer victims), then by name."""
    return (gang.priority, 0 if gang.shrink_to is not None else 1, gang.lost_gpu_seconds, -gang.gpus, gang.key)


def options(candidates: Sequence[RunningGang], nodes: frozenset[str]) -> list[RunningGang]:
    """What evicting each candidate touching the domain may mean: the whole gang, and for an elastic one
    first a shrink towards minReplicas that drops its ranks inside the domain (the highest first)."""
    out = []
    for gang in candidates:
        inside = [rank for rank, (node, _) in enumerate(gang.slots) if node in nodes]
        if not inside:
            continue
        out.append(gang)
        size = next((s for s in sorted(gang.sizes) if s >= len(gang.slots) - len(inside)), None)
        if size is not None and size < len(gang.slots):
            dropped = sorted(inside, reverse=True)[:len(gang.slots) - size]
            out.append(RunningGang(gang.key, gang.priority, tuple(gang.slots[r] for r in sorted(dropped)),
                                   gang.lost_gpu_seconds, gang.requests, shrink_to=size))
    return out


def _add(chosen: list[RunningGang], option: RunningGang) -> list[RunningGang]:
    """One option per gang: evicting it whole replaces shrinking it."""
    return [*(c for c in chosen if c.key != option.key), option]


def _freed(snapshot: Snapshot, victims: Sequence[RunningGang]) -> Snapshot:
    for victim in victims:
        snapshot = snapshot.release(victim.slots, victim.requests)
    return snapshot


def _fits(domain: Snapshot, request: GangRequest, victims: Sequence[RunningGang], decide: Decide) -> Placement | None:
    return decide(_freed(domain, victims), request).placement


def enough(domain: Snapshot, request: GangRequest, nodes: frozenset[str], victims: Sequence[RunningGang]) -> bool:
    """Would these victims leave GPUs enough in the domain at all (no solve can succeed otherwise)?"""
    free = sum(len(domain.free(n)) for n in domain.nodes)
    free += sum(len(g) for v in victims for n, g in v.slots if n in nodes)
    return free >= max(request.smallest * request.gpus_per_replica, request.gpus_per_replica, 1)


def sufficient_prefix(snapshot: Snapshot, request: GangRequest, nodes: frozenset[str],
                      candidates: Sequence[RunningGang]) -> tuple[RunningGang, ...] | None:
    """The cheapest candidates touching the domain, in victim order, until they free GPUs enough (no
    solve: the estimate domains are tried in)."""
    domain = snapshot.only_nodes(nodes)
    chosen: list[RunningGang] = []
    for victim in sorted(options(candidates, nodes), key=victim_order):
        chosen = _add(chosen, victim)
        if enough(domain, request, nodes, chosen):
            return tuple(chosen)
    return None


def plan_in_domain(snapshot: Snapshot, request: GangRequest, nodes: frozenset[str],
                   candidates: Sequence[RunningGang], decide: Decide = solve
                   ) -> tuple[tuple[RunningGang, ...], Placement] | None:
    """The fewest, cheapest victims among `candidates` whose leaving lets the gang fit on `nodes`."""
    domain = snapshot.only_nodes(nodes)
    chosen: list[RunningGang] = []
    placement: Placement | None = None
    for victim in sorted(options(candidates, nodes), key=victim_order):
        chosen = _add(chosen, victim)
        if not enough(domain, request, nodes, chosen):
            continue
        placement = _fits(domain, request, chosen, decide)
        if placement is not None:
            break
    if placement is None:
        return None
    for victim in sorted(chosen, key=victim_order, reverse=True):  # drop any it does not need
        rest = [v for v in chosen if v is not victim]
        if not rest or not enough(domain, request, nodes, rest):
            continue
        without = _fits(domain, request, rest, decide)
        if without is not None:
            chosen, placement = rest, without
    return tuple(sorted(chosen, key=victim_order)), placement


def cost_of(victims: Sequence[RunningGang]) -> tuple[int, float, int]:
    return (max(v.priority for v in victims), sum(v.lost_gpu_seconds for v in victims), len(victims))


def _domains(snapshot: Snapshot, level: int) -> dict[str, frozenset[str]]:
    levels = snapshot.levels
    out: dict[str, set[str]] = {}
    for node in snapshot.nodes:
        out.setdefault(levels.domain_of(node, level), set()).add(node.name)
    return {d: frozenset(n) for d, n in out.items()}


def scopes(snapshot: Snapshot, request: GangRequest) -> list[tuple[str, dict[str, frozenset[str]]]]:
    """The levels to look for a domain to clear, in turn: the required tier alone; without one, from
    the lowest level above the node upwards, then the whole cluster."""
    levels = snapshot.levels
    eligible = template_eligible(snapshot, request)  # a domain is only its nodes the gang may use

    def usable(level: int) -> dict[str, frozenset[str]]:
        return {d: nodes & eligible for d, nodes in _domains(snapshot, level).items() if nodes & eligible}

    if request.required_tier == NODE and request.replicas > 1:
        return []  # several replicas required on one node: nothing to clear would do
    if request.required_tier is not None:
        return [(request.required_tier, usable(levels.index(request.required_tier)))]
    found = [(levels.name(level), usable(level)) for level in range(1, levels.depth + 1)]
    found.append(("cluster", {WHOLE_CLUSTER: eligible} if eligible else {}))
    return found


Plan = TypeVar("Plan")


def search(snapshot: Snapshot, request: GangRequest, estimate: Callable[[frozenset[str]], tuple | None],
           plan_at: Callable[[str, str, frozenset[str]], Plan | None], cost: Callable[[Plan], tuple],
           max_domains: int, hopeless: Callable[[tuple, Plan], bool] = lambda _estimate, _best: False) -> Plan | None:
    """The cheapest plan in one domain, level by level (`scopes`): per level, domains are tried in the
    order of their `estimate` (None: nothing to gain there), at most `max_domains` of them solved
    (`plan_at`), stopping early once `hopeless` says no domain left can beat the best; the first level
    with a plan wins (the tightest domain)."""
    for level, domains in scopes(snapshot, request):
        estimates = sorted((e, d) for d, nodes in domains.items() if (e := estimate(nodes)) is not None)
        best: tuple[tuple, str, Plan] | None = None
        for solved, (guess, domain) in enumerate(estimates):
            if solved >= max_domains or (best is not None and hopeless(guess, best[2])):
                break
            plan = plan_at(level, domain, domains[domain])
            if plan is not None and (best is None or (cost(plan), domain) < best[:2]):
                best = (cost(plan), domain, plan)
        if best is not None:
            return best[2]
    return None


def plan_preemption(snapshot: Snapshot, request: GangRequest, candidates: Sequence[RunningGang],
                    max_domains: int = 4, decide: Decide = solve) -> PreemptionPlan | None:
    """The cheapest plan that clears room for the gang inside one domain, or None (no set of these
    candidates would make room, e.g. the blockers are of higher priority or not preemptible).
    Per level, domains are tried in the order of their estimated cost (the cheapest victims that free
    GPUs enough, no solve), and at most `max_domains` of them are solved: one plan costs a few solves
    on a cluster of thousands of TORs. No domain left untried can have a victim of lower priority than
    the best plan's (the estimate's highest priority is the least any plan there needs)."""
    if not candidates:
        return None

    def estimate(nodes: frozenset[str]) -> tuple | None:
        prefix = sufficient_prefix(snapshot, request, nodes, candidates)
        return cost_of(prefix) if prefix is not None else None

    def plan_at(level: str, domain: str, nodes: frozenset[str]) -> PreemptionPlan | None:
        found = plan_in_domain(snapshot, request, nodes, candidates, decide)
        return PreemptionPlan(level, domain, nodes, *found) if found is not None else None

    return search(snapshot, request, estimate, plan_at, lambda plan: plan.cost, max_domains,
                  hopeless=lambda guess, best: guess[0] > best.cost[0])
