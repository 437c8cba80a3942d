"""What `railyard jobs`, `railyard topology` and `railyard explain` print: pure functions from API
objects (plain dicts) to rows, a JSON-able dict, or text. Colour only when asked (a TTY)."""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from railyard.operator.app.troubleshooting import advice_for
from railyard.operator.base.keys import LABEL_JOB
from railyard.operator.base.objects import parse_job
from railyard.operator.base.reasons import ConditionType
from railyard.topology.api.timestamps import epoch
from railyard.topology.cluster.model import Snapshot
from railyard.topology.cluster.nodes import Trust, pod_usage, trust_all

_COLOURS = (31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96)
_MARKS = string.ascii_uppercase + string.ascii_lowercase + string.digits


def _age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "-"
    seconds = int(now.timestamp() - epoch(timestamp, now.timestamp()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def job_rows(jobs: Sequence[Mapping[str, Any]], now: datetime | None = None) -> list[dict[str, Any]]:
    now = now or datetime.now(UTC)
    rows = []
    for body in sorted(jobs, key=lambda j: (j["metadata"].get("namespace", ""), j["metadata"]["name"])):
        job = parse_job(body)
        placed = job.condition(ConditionType.PLACED)
        placement = job.status.placement
        rows.append({
            "namespace": job.namespace, "name": job.name, "state": str(job.state),
            "placement": placed.reason if placed is not None else "", "replicas": job.status.replicas,
            "wanted": (job.body.get("spec") or {}).get("replicas"),
            "tors": placement.tors if placement is not None else None,
            "railAligned": placement.rail_aligned if placement is not None else None,
            "age": _age(job.meta.get("creationTimestamp"), now),
            "message": placed.message if placed is not None else "",
        })
    return rows


def render_jobs(rows: list[dict[str, Any]], wide: int = 120) -> str:
    head = ("NAMESPACE", "NAME", "STATE", "PLACEMENT", "REPLICAS", "TORS", "RAILS", "AGE", "MESSAGE")
    table = [head] + [(r["namespace"], r["name"], r["state"], r["placement"], f"{r['replicas']}/{r['wanted']}",
                       "-" if r["tors"] is None else str(r["tors"]),
                       "-" if r["railAligned"] is None else ("yes" if r["railAligned"] else "no"), r["age"],
                       r["message"]) for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head) - 1)]
    lines = []
    for row in table:
        text = "  ".join(str(v).ljust(w) for v, w in zip(row[:-1], widths, strict=True)) + "  " + str(row[-1])
        lines.append(text[:wide])
    return "\n".join(lines) if rows else "no TrainingJobs"


def topology(snapshot: Snapshot, pods: Sequence[Mapping[str, Any]], trusted: Trust = trust_all) -> dict[str, Any]:
    """Every TOR, its nodes, and per GPU (rail order) the job holding it: `ns/name`, "other" for
    pods that are not Railyard's, None when free."""
    holders: dict[str, dict[int, str]] = {}
    anonymous: dict[str, int] = {}
    for pod in pods:
        usage = pod_usage(pod, trusted(pod))
        if usage is None or not snapshot.has_node(usage.node):
            continue
        meta = pod.get("metadata") or {}
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        owner = f"{meta.get('namespace')}/{job}" if job else "other"
        for gpu in usage.gpu_indices:
            holders.setdefault(usage.node, {})[gpu] = owner
        anonymous[usage.node] = anonymous.get(usage.node, 0) + max(0, usage.gpu_count - len(usage.gpu_indices))
    tors: dict[str, dict[str, Any]] = {}
    for node in snapshot.nodes:
        held = dict(holders.get(node.name, {}))
        for gpu in sorted(snapshot.used.get(node.name, frozenset())):
            held.setdefault(gpu, "other")  # GPUs counted for pods that name no indices
        entry = tors.setdefault(node.tor, {"tor": node.tor, "leaf": node.leaf, "spine": node.spine, "nodes": []})
        order = sorted(range(node.gpu_count), key=lambda g: (node.rails[g], g))
        entry["nodes"].append({"node": node.name, "gpus": [{"index": g, "rail": node.rails[g], "job": held.get(g)}
                                                           for g in order]})
    return {"tors": [tors[t] for t in sorted(tors)],
            "excluded": [{"node": e.node, "reason": e.reason} for e in snapshot.excluded]}


def render_topology(view: dict[str, Any], colour: bool = False, width: int = 100) -> str:
    jobs = sorted({g["job"] for t in view["tors"] for n in t["nodes"] for g in n["gpus"]
                   if g["job"] not in (None, "other")})
    mark = {job: _MARKS[i % len(_MARKS)] for i, job in enumerate(jobs)}

    def glyph(job: str | None) -> str:
        if job is None:
            return "."
        if job == "other":
            return "o"
        if not colour:
            return mark[job]
        return f"\033[{_COLOURS[jobs.index(job) % len(_COLOURS)]}m{mark[job]}\033[0m"

    lines = ["one mark per GPU in rail order: . free, o not Railyard's, letters: jobs (legend below)", ""]
    for tor in view["tors"]:
        label = f"{tor['tor'][:16]:<16} "
        row, visible = label, len(label)
        for node in tor["nodes"]:
            cell = node["node"] + " " + "".join(glyph(g["job"]) for g in node["gpus"]) + " "
            size = len(node["node"]) + len(node["gpus"]) + 2
            if visible + size > width and visible > len(label):
                lines.append(row.rstrip())
                row, visible = " " * len(label), len(label)
            row += cell
            visible += size
        lines.append(row.rstrip())
    if jobs:
        lines += ["", "legend: " + ", ".join(f"{glyph(j)}={j}" for j in jobs)]
    if view["excluded"]:
        lines += ["", f"{len(view['excluded'])} nodes not usable, e.g. {view['excluded'][0]['node']}: "
                      f"{view['excluded'][0]['reason']}"]
    return "\n".join(lines)


def explanation(job: Mapping[str, Any], decision_reason: str | None, placed: bool, excluded: Mapping[str, str],
                events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    view = parse_job(job)
    by_reason: dict[str, list[str]] = {}
    for node, reason in sorted(excluded.items()):
        by_reason.setdefault(reason, []).append(node)
    return {
        "job": f"{view.namespace}/{view.name}", "state": str(view.state),
        "conditions": [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                       for c in view.conditions],
        "wouldPlaceNow": placed, "reason": decision_reason,
        "excludedNodes": {reason: {"count": len(nodes), "examples": nodes[:5]} for reason, nodes in
                          sorted(by_reason.items(), key=lambda kv: -len(kv[1]))},
        "events": [{k: e.get(k) for k in ("type", "reason", "message", "count", "lastTimestamp")} for e in events],
        "advice": [{"condition": a.condition, "reason": a.reason, "means": a.means, "do": a.do, "more": a.link}
                   for a in advice_for((c.type, c.status, c.reason) for c in view.conditions)],
    }


def render_explanation(info: dict[str, Any]) -> str:
    lines = [f"{info['job']}: {info['state']}"]
    for c in info["conditions"]:
        lines.append(f"  {c['type']}={c['status']} {c['reason'] or ''}: {c['message'] or ''}".rstrip())
    lines.append("")
    if info["wouldPlaceNow"]:
        lines.append("On the cluster as it is now, the gang fits.")
    else:
        lines.append(f"Why it waits (binding constraint per tier): {info['reason']}")
    if info["excludedNodes"]:
        lines.append("Nodes it may not use:")
        for reason, entry in info["excludedNodes"].items():
            lines.append(f"  {entry['count']:>5}  {reason}  (e.g. {', '.join(entry['examples'])})")
    if info["events"]:
        lines += ["", "Events:"]
        lines += [f"  {e['type']:<8} {e['reason']:<14} x{e.get('count') or 1}  {e['message']}" for e in info["events"]]
    for a in info["advice"]:
        lines += ["", f"{a['condition']} {a['reason']}: {a['means']}", f"  What to do: {a['do']}",
                  f"  More: {a['more']}"]
    return "\n".join(lines)
