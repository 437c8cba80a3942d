"""What a TrainingJob needs next, one dataclass per kind (assess returns exactly one; the loop
matches them exhaustively)."""

from __future__ import annotations

from dataclasses import dataclass

from railyard.operator.base.reasons import Cause, FinishReason, PlacedReason, RestartReason
from railyard.topology.cluster.faults import NodeLoss
from railyard.topology.solver.request import GangRequest


@dataclass(frozen=True)
class Done:
    """Nothing to do, ever again (finished, nothing left to clean up)."""


@dataclass(frozen=True)
class Wait:
    """Nothing to do now."""


@dataclass(frozen=True)
class Queue:
    """Needs a placement."""

    request: GangRequest


@dataclass(frozen=True)
class Invalid:
    """The spec cannot be placed: say so, hold nothing."""

    reason: PlacedReason
    message: str


@dataclass(frozen=True)
class Resume:
    """Finish a recorded placement: create the missing pods (after deleting an older placement's), release."""

    missing: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    force: tuple[str, ...] = ()  # pods to delete with grace 0 (stuck on a gone node)


@dataclass(frozen=True)
class Rollback:
    """Drop the placement and its pods, re-queue."""

    reason: PlacedReason
    message: str
    pods: tuple[str, ...] = ()
    force: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()  # nodes to avoid for a while (after a BindTimeout)


@dataclass(frozen=True)
class Cleanup:
    """Delete what is left of a finished gang."""

    pods: tuple[str, ...] = ()
    force: tuple[str, ...] = ()


@dataclass(frozen=True)
class MarkRunning:
    message: str


@dataclass(frozen=True)
class RecordRelease:
    """The gang was released RELEASE_RECORD_SECONDS ago and is not running yet: say Placed=Released
    now (when it runs sooner, MarkRunning says both in one write)."""


@dataclass(frozen=True)
class Finish:
    """Succeeded (`succeeded`) or Failed, with the reason."""

    succeeded: bool
    reason: FinishReason
    message: str


@dataclass(frozen=True)
class Restart:
    """The released gang restarts as a new attempt: nodes under it are lost (`losses`), a pod was
    disrupted or deleted, or the training process failed (`counted` against maxRestarts)."""

    reason: Cause
    message: str
    request: GangRequest
    losses: tuple[NodeLoss, ...] = ()
    counted: bool = False


@dataclass(frozen=True)
class Resize:
    """An elastic gang's size differs from spec.replicas: grow or shrink it (a new attempt)."""

    reason: RestartReason  # SCALE_UP or SCALE_DOWN
    message: str
    request: GangRequest


@dataclass(frozen=True)
class Evict:
    """A victim of a higher-priority gang (marked, saving a step): requeue it once it saved (or its grace ran
    out), shrink it, or let it go on if its preemptor no longer needs the room."""


@dataclass(frozen=True)
class PlaceReplaced:
    """An adopted gang's owner re-made some of its pods (gated) while the others run: place only those ranks,
    next to the survivors (the replacement rule), then pin and release them; the survivors are not touched."""

    ranks: tuple[int, ...]
    pods: tuple[tuple[str, str], ...]  # the gang's pods (name, uid), in rank order
    request: GangRequest


@dataclass(frozen=True)
class RestorePlacement:
    """An adopted gang's pods run released under one of Railyard's placements that no TrainingJob records (its
    TrainingJob was deleted by hand, and this one made again): record that placement, read back from the pods."""

    pods: tuple[tuple[str, str], ...]  # the gang's pods (name, uid), in rank order


Action = (Done | Wait | Queue | Invalid | Resume | Rollback | Cleanup | MarkRunning | RecordRelease | Finish
          | Restart | Resize | Evict | PlaceReplaced | RestorePlacement)
