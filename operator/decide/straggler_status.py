"""What a job's stragglers mean for it, decided from the scores (decide/stragglers.py): the status fields
the report flush writes (step time, the slowest nodes, the Straggling condition), which straggler is evicted
(within the operator's hourly cap, the policy's own), and the restart that evicts it. Pure: the flusher
(act/report_flush.py) feeds it the scores, the tracker and the time."""

from __future__ import annotations

from collections.abc import Sequence

from railyard.operator.base.clock import utc
from railyard.operator.base.objects import Job
from railyard.operator.base.reasons import StragglerMark
from railyard.operator.decide import policy as rules
from railyard.operator.decide import status_transitions as transitions
from railyard.operator.decide.actions import Restart
from railyard.operator.decide.quarantine_limits import Limits, may_evict
from railyard.operator.decide.stragglers import Scores, Straggler, StragglerTracker
from railyard.topology.api.job import StragglerPolicy, StragglerRecord, rfc3339
from railyard.topology.cluster.faults import LossReason, NodeLoss

STRAGGLERS_KEPT = 16  # status.stragglers: the slowest nodes (the CRD allows 64)


def status_fields(job: Job, scores: Scores, flagged: Sequence[Straggler], slow: Sequence[Straggler],
                  mark: dict[str, StragglerMark], policy: StragglerPolicy, now: float) -> dict[str, object]:
    """The status fields that changed: the step time (when due), the slowest nodes with what was done about
    each, the Straggling condition."""
    fields: dict[str, object] = {}
    stamp = utc(now)
    if scores.step_p50 is not None and rules.step_time_due(job.status.step_time, scores.step_p50, now):
        fields["step_time"] = transitions.step_time(scores.step_p50, scores.step_p90, scores.samples, stamp)
    worst = sorted(flagged, key=lambda f: (f.score, f.node))[:STRAGGLERS_KEPT]
    stragglers = [StragglerRecord(node=f.node, ranks=list(f.ranks), score=round(f.score, 2), since=utc(f.since),
                                  action=mark[f.node]) for f in sorted(worst, key=lambda f: f.node)]
    if transitions.stragglers_changed(job.status.stragglers, stragglers):
        fields["stragglers"] = stragglers
    conditions = transitions.straggling_conditions(job, rules.straggling(slow, scores, policy), stamp)
    if conditions is not None:
        fields["conditions"] = conditions
    return fields


def to_evict(job: Job, flagged: Sequence[Straggler], tracker: StragglerTracker, policy: StragglerPolicy,
             limits: Limits, now: float) -> Straggler | None:
    """The slowest persistent straggler, when the job may evict one more this hour (its own recorded
    evictions and this operator's count, under the policy's cap and the operator's)."""
    evicted = [t.timestamp() for t in job.status.straggler_evictions] + list(tracker.evictions)
    allowed = may_evict(evicted, now, policy.max_evictions_per_hour, limits)
    return rules.eviction_choice(flagged, allowed)


def eviction_restart(job: Job, straggler: Straggler) -> Restart:
    """The restart that evicts the gang from a straggler's node (the fault path: replacement, quarantine)."""
    assert job.request is not None
    since = rfc3339(utc(straggler.since))
    message = (f"node {straggler.node} (ranks {', '.join(map(str, straggler.ranks))}) computes at "
               f"{straggler.score:.2f} of the fastest comparable node's speed since {since}")
    return Restart(LossReason.STRAGGLER, message, job.request,
                   losses=(NodeLoss(straggler.node, LossReason.STRAGGLER, message, since),))
