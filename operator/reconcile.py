"""What a TrainingJob needs next: a pure function of the job, its pods and the time.

The placer (the only API caller for jobs) turns each Action into API calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from railyard.operator import conditions as cond
from railyard.operator.labels import ANNOTATION_PLACEMENT_ID, SCHEDULING_GATE
from railyard.topology.api import TrainingJob
from railyard.topology.documents import format_validation
from railyard.topology.model import Snapshot

RELEASED = "Released"
PLACING = "Placing"


@dataclass(frozen=True)
class Action:
    kind: str  # done | cleanup | invalid | queue | resume | rollback | succeed | fail | running | wait
    reason: str = ""
    message: str = ""
    pods: tuple[str, ...] = field(default=())  # pod names the action concerns (to delete / to create)
    model: TrainingJob | None = None  # the validated job, for `queue`


def _seconds_since(timestamp: str | None, now: float) -> float:
    if not timestamp:
        return 0.0
    return now - datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or [])


def assess(job: dict[str, Any], pods: list[dict[str, Any]], snapshot: Snapshot, now: float,
           bind_timeout: float) -> Action:
    status = job.get("status") or {}
    conditions = status.get("conditions") or []
    if cond.is_true(conditions, cond.SUCCEEDED):
        return Action("done")
    if cond.is_true(conditions, cond.FAILED):
        alive = [p["metadata"]["name"] for p in pods
                 if p["status"].get("phase") not in ("Succeeded", "Failed")
                 and not p["metadata"].get("deletionTimestamp")]
        return Action("cleanup", pods=tuple(alive)) if alive else Action("done")
    try:
        model = TrainingJob.model_validate(job)
    except ValidationError as e:
        return Action("invalid", "InvalidSpec", format_validation(e))
    placement = status.get("placement") or {}
    if not placement.get("ranks"):
        stray = [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]
        return Action("rollback", "StalePods", "pods without a recorded placement", tuple(stray)) if stray \
            else Action("queue", model=model)
    placement_id = placement.get("id", "")
    mine = {p["metadata"]["name"]: p for p in pods
            if p["metadata"]["annotations"].get(ANNOTATION_PLACEMENT_ID) == placement_id}
    stale = tuple(p["metadata"]["name"] for p in pods if p["metadata"]["name"] not in mine)
    wanted = {r["pod"]: r for r in placement["ranks"]}
    placed = cond.get(conditions, cond.PLACED) or {}
    if placed.get("reason") != RELEASED:
        # Placement recorded but not released: a previous leader stopped mid-way. Finish it if the
        # nodes and GPUs are still ours, else roll back and re-queue.
        for rank in placement["ranks"]:
            if not snapshot.has_node(rank["node"]):
                return Action("rollback", "NodeLost", f"node {rank['node']} of rank {rank['rank']} is gone or "
                              "not usable", tuple(mine) + stale)
        missing = tuple(sorted(set(wanted) - set(mine)))
        return Action("resume", PLACING, "", missing)
    # Released: watch the gang.
    phases = [mine[p]["status"].get("phase") if p in mine else None for p in wanted]
    failed = [p for p in wanted if p in mine and mine[p]["status"].get("phase") == "Failed"]
    if failed:
        pod = mine[failed[0]]
        why = pod["status"].get("terminated") or "pod failed"
        return Action("fail", "PodFailed", f"pod {failed[0]} failed: {why}")
    gone = [p for p in wanted if p not in mine]
    if gone:
        return Action("fail", "PodDeleted", f"pod {gone[0]} of the gang was deleted")
    if all(ph == "Succeeded" for ph in phases):
        return Action("succeed", "AllSucceeded", f"all {len(wanted)} replicas succeeded")
    unbound = [p for p in wanted if not mine[p]["spec"].get("nodeName")]
    if unbound and _seconds_since(placed.get("lastTransitionTime"), now) > bind_timeout:
        return Action("rollback", "BindTimeout",
                      f"{len(unbound)} pods not bound {bind_timeout:.0f}s after release (e.g. {unbound[0]}); "
                      "re-planning the gang", tuple(mine) + stale)
    if all(ph == "Running" for ph in phases) and not cond.is_true(conditions, cond.RUNNING):
        return Action("running", "AllRunning", f"all {len(wanted)} replicas running")
    if any(_gated(mine[p]) for p in wanted):
        return Action("resume", PLACING, "release interrupted", ())
    return Action("wait")
