"""The planner's table output: a summary per job and a picture of where it landed.

TORs are rows, nodes are cells; each cell shows the node's GPUs in rail order:
`#` this job, `o` already used, `.` free. Fits an 80-column terminal.
"""

from __future__ import annotations

from railyard.topology.cluster.model import GpuNode
from railyard.topology.planner.plan import PlanResult
from railyard.topology.solver.placement import Decision

WIDTH = 80


def _cell(node: GpuNode, mine: set[int], used: frozenset[int]) -> str:
    order = sorted(range(node.gpu_count), key=lambda g: (node.rails[g], g))
    marks = "".join("#" if g in mine else "o" if g in used else "." for g in order)
    return f"{node.name} {marks}"


def _summary(decision: Decision) -> str:
    req = decision.request
    head = f"{req.namespace}/{req.name}"
    p = decision.placement
    if p is None:
        return f"{head}: NOT PLACED - {decision.reason}"
    placed = len(p.replicas)
    wanted = f"{placed}" if placed == req.replicas else f"{placed} of {req.replicas}"
    return (f"{head}: {wanted} x {req.gpus_per_replica} GPUs  TORs {p.tors}  leaves {p.leaves}  "
            f"spines {p.spines}  {'rail-aligned' if p.rail_aligned else 'NOT rail-aligned'}  ring {p.ring_cost}")


def _picture(decision: Decision, result: PlanResult, used_before: dict[str, frozenset[int]]) -> list[str]:
    p = decision.placement
    if p is None:
        return []
    snapshot = result.after
    mine: dict[str, set[int]] = {}
    for r in p.replicas:
        mine.setdefault(r.node, set()).update(r.gpus)
    tors = sorted({snapshot.node(n).tor for n in mine})
    lines: list[str] = []
    for tor in tors:
        members = [n for n in snapshot.nodes if n.tor == tor]
        cells = [_cell(n, mine.get(n.name, set()), used_before.get(n.name, frozenset())) for n in members]
        label = f"  {tor[:14]:<14} "
        pad = " " * len(label)
        row = label
        for cell in cells:
            if len(row) + len(cell) + 1 > WIDTH and row.strip() != tor[:14]:
                lines.append(row.rstrip())
                row = pad
            row += cell + " "
        lines.append(row.rstrip())
    return lines


def render_table(result: PlanResult) -> str:
    lines = ["legend: one mark per GPU in rail order - # this job, o in use before, . free", ""]
    used: dict[str, frozenset[int]] = dict(result.before.used)
    migrations = result.migrations or (None,) * len(result.decisions)
    for decision, migration in zip(result.decisions, migrations, strict=True):
        lines.append(_summary(decision))
        if migration is not None:
            for move in migration.moves:
                lines.append(f"  after moving {move.key} off {', '.join(move.leaves)} to "
                             f"{', '.join(sorted({r.new for r in move.replacements}))} "
                             f"({migration.level} {migration.domain} cleared)")
        lines.extend(_picture(decision, result, used))
        if decision.placement is not None:
            for node, gpus in decision.placement.allocations:
                used[node] = used.get(node, frozenset()) | frozenset(gpus)
        lines.append("")
    placed = sum(d.placed for d in result.decisions)
    summary = f"{placed}/{len(result.decisions)} jobs placed; free GPUs {result.before.free_gpus} -> " \
              f"{result.after.free_gpus}"
    if result.solve_seconds:
        summary += f"; solve {result.solve_seconds * 1000:.1f} ms"
    lines.append(summary)
    return "\n".join(lines)
