"""The policy choices of the fault, resize and straggler paths, as pure functions (the actors carry
them out): how long a restart waits, what happens when lost ranks find no replacement, when an
elastic gang may grow, which straggler is evicted and what the Straggling condition says, when the
step time is worth a status write, which step a checkpoint request asks for."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from railyard.operator.base.reasons import StragglingReason
from railyard.operator.decide.actions import Restart
from railyard.operator.decide.stragglers import Scores, Straggler
from railyard.topology.api.job import ElasticPolicy, FaultPolicy, OnNoReplacement, StepTime, StragglerPolicy
from railyard.topology.cluster.faults import LossReason, NodeHealth, NodeLoss

_QUARANTINED = (LossReason.NODE_NOT_READY, LossReason.GPU_FAULT, LossReason.GPU_ALLOCATABLE_DROPPED, LossReason.TAINT,
                LossReason.STRAGGLER)
_UNREACHABLE = (LossReason.NODE_DELETED, LossReason.OUT_OF_SERVICE)


def quarantines(reason: LossReason) -> bool:
    """A loss that says the node is faulty is quarantined; a deleted, shut-down (out-of-service),
    cordoned or drained node is the admin's, and is not."""
    return reason in _QUARANTINED


def force_delete(loss: NodeLoss, force_after: float) -> bool:
    """Delete the node's pods with grace 0 only where no kubelet will answer: the node is gone, shut
    down (out-of-service), or NotReady for the force-delete time. Elsewhere the pod's own grace
    period (SIGTERM lets a trainer save)."""
    if loss.reason in _UNREACHABLE:
        return True
    return loss.reason == LossReason.NODE_NOT_READY and loss.observed_for >= force_after


def restart_delay(action: Restart, policy: FaultPolicy, process_restarts: int, loss_debounce: float,
                  not_ready_debounce: float) -> float:
    """How long a restart waits after its first signal was seen. Losses close together (a switch, a
    rack's power) make one restart: act only once the first one has been seen for the window. Nodes
    that stopped at the same moment turn NotReady up to a lease renewal + a monitor period apart, so
    heartbeat losses wait longer. A process failure waits its backoff."""
    if action.counted:
        return policy.backoff(process_restarts)
    if action.losses and all(loss.reason == LossReason.NODE_NOT_READY for loss in action.losses):
        return not_ready_debounce
    return loss_debounce


BACKOFF_RESET_SECONDS = 600.0  # as the kubelet's CrashLoopBackOff: an attempt that ran this long resets it


def failure_streak(previous: int, ran_seconds: float | None) -> int:
    """Process failures in a row the backoff doubles over: none once the failed attempt had run for
    BACKOFF_RESET_SECONDS. Without the reset a month-long job's every software fault would wait the
    maximum backoff after its first few (processRestarts only grows)."""
    return 0 if ran_seconds is not None and ran_seconds >= BACKOFF_RESET_SECONDS else previous


def infra_backoff(recent: int, initial: float, cap: float) -> float:
    """How long after its last one a job's next infrastructure restart waits, with `recent` of them in
    the last hour: none for the first, then doubling from `initial` up to `cap`."""
    return 0.0 if recent <= 0 else min(cap, initial * 2 ** (recent - 1))


class NoReplacementStep(enum.Enum):
    WAIT = "wait"  # healthy ranks keep their nodes; retried as capacity frees
    SHRINK = "shrink"  # continue on the survivors (falls back to REQUEUE when no valid size is left)
    FAIL = "fail"
    REQUEUE = "requeue"  # place the whole gang again


def no_replacement_step(policy: FaultPolicy, waited: float) -> NoReplacementStep:
    if waited < policy.replacement_timeout_seconds:
        return NoReplacementStep.WAIT
    return {OnNoReplacement.SHRINK: NoReplacementStep.SHRINK, OnNoReplacement.FAIL: NoReplacementStep.FAIL,
            OnNoReplacement.REQUEUE: NoReplacementStep.REQUEUE}[policy.on_no_replacement]


@dataclass(frozen=True)
class GrowRule:
    allowed: bool
    min_growth: int


def grow_rule(user_asked: bool, since_last_attempt: float, policy: ElasticPolicy) -> GrowRule:
    """A grow someone asked for (kubectl scale, an edit) goes at once by any amount; growing back by
    itself waits cooldownSeconds after the gang's last attempt began and adds at least minGrowth."""
    if user_asked:
        return GrowRule(True, 1)
    return GrowRule(since_last_attempt >= policy.cooldown_seconds, policy.min_growth)


def eviction_choice(flagged: Sequence[Straggler], may_evict: bool) -> Straggler | None:
    """The slowest persistent straggler, while the eviction budget allows."""
    slow = [f for f in flagged if f.persistent]
    if not slow or not may_evict:
        return None
    return min(slow, key=lambda f: f.score)


def straggling(slow: Sequence[Straggler], scores: Scores, policy: StragglerPolicy) -> tuple[StragglingReason,
                                                                                              str] | None:
    """What the Straggling condition says while it is True, or None (no straggler)."""
    if slow:
        return StragglingReason.SLOW, (f"slow for {policy.min_duration_seconds}s or more: "
                                       f"{', '.join(f.node for f in slow)} (scores in status.stragglers)")
    if scores.network:
        return StragglingReason.NETWORK, (f"every node of the job in TOR {', '.join(scores.network)} is slow: a "
                                          "shared cause (network, power, cooling); no node is evicted")
    return None


def step_time_due(recorded: StepTime | None, p50: float, now: float) -> bool:
    """Written when it changes materially (5 %) or once a minute: never a status write per report."""
    if recorded is None or recorded.p50_seconds is None:
        return True
    updated = recorded.updated_at.timestamp() if recorded.updated_at is not None else 0.0
    return abs(p50 - recorded.p50_seconds) > 0.05 * p50 or now - updated > 60


def checkpoint_step(max_step: int, worker_interval: float, step_seconds: float | None) -> int:
    """The step every rank is asked to save: far enough ahead that all of them hear of the request
    (it rides on the report answers) before they reach it."""
    margin = math.ceil(3 * worker_interval / max(step_seconds or 1.0, 0.001))
    return max_step + margin + 2


@dataclass(frozen=True)
class Partition:
    """Many nodes holding ranks went dark together: more likely the control plane, the network
    between it and the nodes, or this operator is cut off than that they all failed at once."""

    tripped: bool
    unready: tuple[str, ...]  # nodes holding ranks that are NotReady now
    ranked: int  # nodes holding ranks
    message: str = ""


def partition(health: Mapping[str, NodeHealth], ranked: Iterable[str], leaf_of: Mapping[str, str], now: float,
              was_tripped: bool, window: float, share: float, min_nodes: int) -> Partition:
    """The circuit breaker (Kubernetes' node lifecycle controller stops evicting in an unhealthy zone
    for the same reason). It trips when, within `window` seconds, more than `share` of the nodes
    holding ranks (and at least `min_nodes`), or every one of at least `min_nodes` nodes holding ranks
    in one leaf, turned NotReady; once tripped it holds while that many are still NotReady."""
    held = set(ranked)
    unready = tuple(sorted(n for n in held if (h := health.get(n)) is not None and not h.ready))
    recent = [n for n in unready if (h := health.get(n)) is not None and h.not_ready_seen is not None
              and now - h.not_ready_seen <= window]
    counted = unready if was_tripped else tuple(recent)
    if not counted:  # the common case, asked every pass: nothing to group by leaf
        return Partition(False, unready, len(held))
    nodes = sorted(held)
    many = len(counted) >= min_nodes and len(counted) > share * len(nodes)
    by_leaf: dict[str, list[str]] = {}
    for n in nodes:
        by_leaf.setdefault(leaf_of.get(n, ""), []).append(n)
    dark_leaf = next((leaf for leaf, members in sorted(by_leaf.items()) if leaf and len(members) >= min_nodes
                      and all(m in counted for m in members)), None)
    if not (many or dark_leaf):
        return Partition(False, unready, len(nodes))
    why = f"leaf {dark_leaf}: all {len(by_leaf[dark_leaf])} nodes" if dark_leaf and not many else \
        f"{len(counted)} of {len(nodes)} nodes holding ranks"
    return Partition(True, unready, len(nodes),
                     f"{why} turned NotReady within {window:.0f}s: treated as a partition of the control plane or "
                     "this operator; no restarts, quarantines or forced deletions until it clears")
