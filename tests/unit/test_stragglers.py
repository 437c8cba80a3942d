"""Straggler scoring on simulated report streams (fake clock): who is flagged, when, and who never is."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.operator.decide.stragglers import StragglerTracker, score
from railyard.topology.api.job import StragglerPolicy

from tests.support.settings import settings as operator_settings

TORS = {f"n{i}": f"tor{i // 4}" for i in range(16)}  # 16 nodes, 4 per TOR, one rank per node
RANKS = {i: f"n{i}" for i in range(16)}


def simulate(policy: StragglerPolicy, slow: dict[str, float], noise: float, seconds: int, seed: int = 0,
             every: int = 5):
    """One step per second; each rank's compute = 1 s x its node's factor x uniform noise. Scores every
    `every` seconds. Returns (first time any node was flagged persistent, nodes ever flagged, last scores)."""
    rng = random.Random(seed)
    samples: dict[int, list[tuple[int, float, float]]] = {r: [] for r in RANKS}
    tracker = StragglerTracker()
    first, flagged, scores = None, set(), None
    for step in range(seconds):
        computes = {r: slow.get(n, 1.0) * rng.uniform(1 - noise, 1 + noise) for r, n in RANKS.items()}
        step_seconds = max(computes.values()) + 0.2  # everyone waits for the slowest, then the collective
        for r, c in computes.items():
            samples[r].append((step, c, step_seconds))
            del samples[r][:-256]
        if step % every:
            continue
        scores = score(samples, RANKS, TORS, policy)
        if scores is None:
            continue
        for s in tracker.observe(scores, float(step), policy):
            if s.persistent:
                flagged.add(s.node)
                first = step if first is None else first
    return first, flagged, scores


def test_a_node_25_percent_slower_is_flagged_after_the_window_and_min_duration():
    policy = StragglerPolicy(threshold=0.85, minDurationSeconds=300, warmupSteps=20)
    first, flagged, scores = simulate(policy, {"n5": 1.25}, noise=0.05, seconds=900)
    assert flagged == {"n5"}
    # Warm-up (20 steps) + enough window for the median to move (~25 steps) + 300 s, scored every 5 s.
    assert first is not None and 300 <= first <= 20 + 50 + 300 + 5, first
    assert scores is not None and abs(scores.nodes["n5"].score - 0.8) < 0.05 and not scores.network
    assert scores.step_p50 is not None and scores.step_p50 > 1.25, "step time follows the slowest rank"


def test_transient_slowness_shorter_than_min_duration_is_never_flagged():
    policy = StragglerPolicy(threshold=0.85, minDurationSeconds=300)
    rng = random.Random(1)
    samples: dict[int, list[tuple[int, float, float]]] = {r: [] for r in RANKS}
    tracker = StragglerTracker()
    for step in range(3600):
        slow = 1.5 if 1000 <= step < 1200 else 1.0  # n3 slow for 200 s, then fine again
        for r, n in RANKS.items():
            samples[r].append((step, (slow if n == "n3" else 1.0) * rng.uniform(0.95, 1.05), 1.7))
            del samples[r][:-256]
        scores = score(samples, RANKS, TORS, policy)
        if scores is not None and step % 5 == 0:
            assert not [s for s in tracker.observe(scores, float(step), policy) if s.persistent], step


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_noise_alone_never_evicts_over_hours(seed):
    first, flagged, _ = simulate(StragglerPolicy(), {}, noise=0.05, seconds=4 * 3600, seed=seed, every=30)
    assert first is None and not flagged


def test_a_slow_tor_is_network_and_nobody_is_flagged():
    policy = StragglerPolicy(threshold=0.85, minDurationSeconds=60)
    slow = {n: 1.3 for n, t in TORS.items() if t == "tor2"}
    first, flagged, scores = simulate(policy, slow, noise=0.03, seconds=400)
    assert scores is not None and scores.network == ("tor2",) and not scores.slow
    assert first is None and not flagged


def test_pipeline_stages_are_compared_only_with_themselves():
    policy = StragglerPolicy(threshold=0.85, warmupSteps=0)
    samples = {r: [(s, 2.0 if r % 2 else 1.0, 2.2) for s in range(20)] for r in RANKS}  # stage 1 does 2x work
    stage = {r: r % 2 for r in RANKS}
    by_stage = score(samples, RANKS, TORS, policy, stage_of=stage)
    assert by_stage is not None and by_stage.slow == ()
    mixed = score(samples, RANKS, TORS, policy)
    assert mixed is not None and set(mixed.slow) == {f"n{i}" for i in range(1, 16, 2)}, "compared across stages"


def test_evictions_are_rate_limited_per_hour_and_a_policy_can_only_ask_for_fewer():
    from railyard.operator.decide.quarantine_limits import Limits, may_evict

    limits = Limits.of(operator_settings(straggler_evictions_per_hour=2).quarantine)
    evicted: list[float] = []
    for t in (0.0, 10.0):
        assert may_evict(evicted, t, 2, limits)
        evicted.append(t)
    assert not may_evict(evicted, 20.0, 2, limits) and may_evict(evicted, 3601.0, 2, limits)
    assert not may_evict(evicted, 20.0, 1_000_000, limits), "a tenant's policy cannot raise the operator's cap"
    assert not may_evict([0.0], 20.0, 1, limits), "but it can ask for fewer"
