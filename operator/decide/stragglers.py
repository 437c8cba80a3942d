"""Slow nodes from the ranks' reported compute times: pure scoring and a tracker with a clock.

In synchronous training every rank's step takes as long as the slowest rank's, so the step time
cannot name a straggler; the time a rank spends computing before it blocks in the collective can.
Per node: the median of its ranks' compute times over the window (the slowest rank of the node
counts). Score = the fastest comparable node's median / this node's, in (0, 1] (the NVIDIA
resiliency extension's relative score); below `threshold` the node is slow. Comparable = the same
pipeline stage (stages legitimately differ). When every one of the job's nodes in a TOR is slow and
nodes elsewhere are not, the cause is shared (the TOR's network, power or cooling): reported as
`Network`, nobody is evicted. A node must stay slow for `minDurationSeconds` to count.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from railyard.topology.api.job import StragglerPolicy

Sample = tuple[int, float, float]  # step, compute seconds, step seconds (-1: not measured)
MIN_SAMPLES = 5


@dataclass(frozen=True)
class NodeScore:
    node: str
    tor: str
    ranks: tuple[int, ...]
    median: float
    score: float


@dataclass(frozen=True)
class Scores:
    nodes: dict[str, NodeScore]
    slow: tuple[str, ...]  # nodes below the threshold, not explained by their TOR
    network: tuple[str, ...]  # TORs whose every node of the job is slow
    step_p50: float | None
    step_p90: float | None
    samples: int


def _window(samples: Sequence[Sample], first_step: int, warmup: int, steps: int) -> list[Sample]:
    valid = [s for s in samples if s[0] >= first_step + warmup]
    return valid[-steps:]


def score(samples_by_rank: Mapping[int, Sequence[Sample]], rank_nodes: Mapping[int, str], tors: Mapping[str, str],
          policy: StragglerPolicy, first_step: int = 0, stage_of: Mapping[int, int] | None = None) -> Scores | None:
    """None until every rank has at least MIN_SAMPLES scored samples (after warm-up)."""
    medians: dict[int, float] = {}
    step_times: list[float] = []
    for rank in rank_nodes:
        window = _window(samples_by_rank.get(rank) or (), first_step, policy.warmup_steps, policy.window.steps)
        compute = [s[1] for s in window if s[1] > 0]
        if len(compute) < MIN_SAMPLES:
            return None
        medians[rank] = statistics.median(compute)
        step_times.extend(s[2] for s in window if s[2] > 0)
    by_node: dict[str, list[int]] = {}
    for rank, node in rank_nodes.items():
        by_node.setdefault(node, []).append(rank)
    stage = stage_of or {}
    node_time = {n: max(medians[r] for r in ranks) for n, ranks in by_node.items()}
    node_stage = {n: min(stage.get(r, 0) for r in ranks) for n, ranks in by_node.items()}
    best: dict[int, float] = {}
    for n, t in node_time.items():
        best[node_stage[n]] = min(t, best.get(node_stage[n], t))
    nodes = {n: NodeScore(n, tors.get(n, ""), tuple(sorted(by_node[n])), t, best[node_stage[n]] / t if t > 0 else 1.0)
             for n, t in node_time.items()}
    slow = {n for n, s in nodes.items() if s.score < policy.threshold}
    by_tor: dict[str, list[str]] = {}
    for n, s in nodes.items():
        by_tor.setdefault(s.tor, []).append(n)
    network = sorted(t for t, members in by_tor.items()
                     if len(members) >= 2 and all(m in slow for m in members) and len(slow) < len(nodes))
    slow -= {n for t in network for n in by_tor[t]}
    quantiles = statistics.quantiles(step_times, n=10) if len(step_times) >= 2 else None
    return Scores(nodes, tuple(sorted(slow)), tuple(network),
                  statistics.median(step_times) if step_times else None, quantiles[8] if quantiles else None,
                  len(step_times))


@dataclass(frozen=True)
class Straggler:
    node: str
    ranks: tuple[int, ...]
    score: float
    since: float  # epoch seconds: first seen below the threshold
    persistent: bool  # below the threshold for minDurationSeconds


@dataclass
class StragglerTracker:
    """Per job and generation: how long each node has been slow; evictions this operator made (until
    status.stragglerEvictions, which the hourly cap counts, carries them)."""

    below_since: dict[str, float] = field(default_factory=dict)
    network_since: dict[str, float] = field(default_factory=dict)
    evictions: deque[float] = field(default_factory=deque)

    def observe(self, scores: Scores, now: float, policy: StragglerPolicy) -> list[Straggler]:
        self.below_since = {n: self.below_since.get(n, now) for n in scores.slow}
        self.network_since = {t: self.network_since.get(t, now) for t in scores.network}
        return [Straggler(n, scores.nodes[n].ranks, scores.nodes[n].score, since,
                          now - since >= policy.min_duration_seconds)
                for n, since in sorted(self.below_since.items())]

    def evicted(self, now: float) -> None:
        self.evictions.append(now)
