"""A job's goodput ledger: the wall time since the gang first ran, split into productive time (its ranks
made progress past the best step any attempt reached) and time lost, by cause. Pure: the report
flusher (act/report_flush) feeds it what it observes every flush and writes it to status.goodput.

Each interval between two observations is attributed by what the job did during it:
- its step advanced: the part above the best previous step is productive, the rest is **recompute**
  (steps done again since the checkpoint the attempt resumed from), in proportion to the steps;
- the gang is restarting and not all pods of the new attempt are bound (or it waits in the queue):
  **capacity**;
- every pod is bound but the new attempt reports no step yet (process start, rendezvous, NCCL init,
  loading the checkpoint): **restart**;
- the gang runs but no step advanced: **stalled** — until a restart is decided; then the part after
  the fault was first detected (lastRestart.detectedAt → decidedAt) is **detection** instead.
A quiet spell no longer than `quiet_seconds` (the ranks' report cadence) is left unaccounted until it ends: ranks
report every few seconds, not every step, so a flush that saw no new report is no evidence of a stall. If the step
then advances, the spell was work; if it lasts longer, or a restart is decided, it was a stall from its start.
The causes and the productive time add up to the accounted wall time (a hypothesis property holds it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum

from railyard.topology.api.job import GoodputStatus, LostSeconds


class LossCause(StrEnum):
    DETECTION = "detection"
    CAPACITY = "capacity"
    RESTART = "restart"
    RECOMPUTE = "recompute"
    STALLED = "stalled"


class Activity(StrEnum):
    """What the gang did during an interval, as the flusher sees it at its end."""

    RUNNING = "Running"  # every rank of the current attempt is running
    WAITING = "Waiting"  # restarting or re-queued: not every pod of the attempt is bound
    STARTING = "Starting"  # every pod bound, the attempt has reported no step yet


@dataclass(frozen=True)
class Ledger:
    since: float  # wall seconds: when the gang first ran
    at: float  # wall seconds: the end of the accounted time
    productive: float = 0.0
    detection: float = 0.0
    capacity: float = 0.0
    restart: float = 0.0
    recompute: float = 0.0
    stalled: float = 0.0
    best_step: int = 0  # the highest step any attempt reached
    step: int | None = None  # the current attempt's step at `at` (None: no report of it yet)
    attempt: int = 0  # the restart count `step` belongs to
    stalled_since: float | None = None  # wall seconds: start of the current stall (for detection)

    @property
    def wall(self) -> float:
        return self.at - self.since

    @property
    def lost(self) -> float:
        return self.detection + self.capacity + self.restart + self.recompute + self.stalled

    @property
    def ratio(self) -> float | None:
        return round(self.productive / self.wall, 4) if self.wall > 0 else None

    def lost_by_cause(self) -> dict[LossCause, float]:
        return {LossCause.DETECTION: self.detection, LossCause.CAPACITY: self.capacity,
                LossCause.RESTART: self.restart, LossCause.RECOMPUTE: self.recompute,
                LossCause.STALLED: self.stalled}


def start(now: float, step: int | None = None, attempt: int = 0) -> Ledger:
    return Ledger(since=now, at=now, best_step=step or 0, step=step, attempt=attempt)


def observe(ledger: Ledger, now: float, activity: Activity, attempt: int, step: int | None,
            first_step: int | None = None, step_seconds: float | None = None, quiet_seconds: float = 0.0) -> Ledger:
    """Account the interval from `ledger.at` to `now`. `step`: the highest step the current attempt
    (`attempt`) reported, None when it has reported none; `first_step`: the lowest it reported; `step_seconds`: how
    long a step takes (the job's median), to tell in the attempt's first interval its steps from its start-up;
    `quiet_seconds`: how long running ranks may go without a new step before the time counts as stalled."""
    dt = max(0.0, now - ledger.at)
    previous = ledger.step if ledger.attempt == attempt else None
    if _quiet(activity, step, previous) and ledger.stalled_since is None and dt <= quiet_seconds:
        return ledger  # not yet a stall: the next observation accounts this spell with its own
    fields: dict[str, float | None] = {}
    if step is not None and previous is not None and step > previous:
        above = max(0, step - max(previous, ledger.best_step))
        share = above / (step - previous)
        fields.update(productive=ledger.productive + dt * share, recompute=ledger.recompute + dt * (1 - share),
                      stalled_since=None)
    elif step is not None and previous is None:
        # The attempt's first report: the time before its first step was start-up; its steps since, at the job's
        # step time, were work (above the best step) or recomputed (below it).
        done = step - first_step + 1 if first_step is not None and first_step <= step else 0
        worked = min(dt, done * step_seconds) if done and step_seconds else 0.0
        share = max(0, step - max(first_step - 1, ledger.best_step)) / done if done and first_step is not None \
            else 0.0
        fields.update(restart=ledger.restart + dt - worked, productive=ledger.productive + worked * share,
                      recompute=ledger.recompute + worked * (1 - share), stalled_since=None)
    elif activity == Activity.WAITING:
        fields.update(capacity=ledger.capacity + dt, stalled_since=None)
    elif activity == Activity.STARTING or step is None:
        fields.update(restart=ledger.restart + dt, stalled_since=None)
    else:
        fields.update(stalled=ledger.stalled + dt,
                      stalled_since=ledger.stalled_since if ledger.stalled_since is not None else ledger.at)
    best = max(ledger.best_step, step or 0)
    return replace(ledger, at=now, step=step, attempt=attempt, best_step=best, **fields)  # type: ignore[arg-type]


def _quiet(activity: Activity, step: int | None, previous: int | None) -> bool:
    """The gang runs and its attempt reported steps, none new since the last observation."""
    return activity == Activity.RUNNING and step is not None and previous is not None and step <= previous


def restarted(ledger: Ledger, detected: float | None, decided: float, quiet_seconds: float = 0.0) -> Ledger:
    """A restart was decided at `decided` for a fault first seen at `detected`: the stall between them
    was detection, not an unexplained stall. A quiet spell left unaccounted (observe's `quiet_seconds`) up to
    the decision was the stall's start."""
    if ledger.stalled_since is None and ledger.step is not None and 0.0 < decided - ledger.at <= quiet_seconds:
        ledger = replace(ledger, at=decided, stalled=ledger.stalled + decided - ledger.at, stalled_since=ledger.at)
    if detected is None or ledger.stalled_since is None:
        return replace(ledger, stalled_since=None)
    moved = min(ledger.stalled, max(0.0, min(decided, ledger.at) - max(detected, ledger.stalled_since)))
    return replace(ledger, stalled=ledger.stalled - moved, detection=ledger.detection + moved, stalled_since=None)


def to_status(ledger: Ledger) -> GoodputStatus:
    def stamp(t: float) -> datetime:
        return datetime.fromtimestamp(t, UTC)

    return GoodputStatus.model_validate({
        "since": stamp(ledger.since), "updatedAt": stamp(ledger.at), "ratio": ledger.ratio,
        "productiveSeconds": round(ledger.productive, 1),
        "lostSeconds": LostSeconds(**{c.value: round(v, 1) for c, v in ledger.lost_by_cause().items()}),
        "bestStep": ledger.best_step, "step": ledger.step, "attempt": ledger.attempt,
        "stalledSince": stamp(ledger.stalled_since) if ledger.stalled_since is not None else None})


def from_status(status: GoodputStatus) -> Ledger:
    lost = status.lost_seconds
    return Ledger(since=status.since.timestamp(), at=status.updated_at.timestamp(),
                  productive=status.productive_seconds, detection=lost.detection, capacity=lost.capacity,
                  restart=lost.restart, recompute=lost.recompute, stalled=lost.stalled, best_step=status.best_step,
                  step=status.step, attempt=status.attempt,
                  stalled_since=status.stalled_since.timestamp() if status.stalled_since is not None else None)
