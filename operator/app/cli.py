"""`railyard` (also `kubectl railyard`): the offline planner and the placement benchmark.

    railyard plan --nodes NODES.yaml [--pods PODS.yaml] --jobs JOBS.yaml [--output table|json]
    railyard plan --kubeconfig ~/.kube/config --jobs JOBS.yaml      # "where would this go now?"
    railyard status [--namespace NS]                                  # where did my jobs land?
    railyard jobs [-n NS] [-o table|json]                             # placement summary
    railyard topology [-o table|json]                                 # TORs x nodes, GPUs by job, rails
    railyard explain JOB [-n NS] [-o table|json]                      # why does it wait?
    railyard bench [--quick]
    railyard operator

Exit 0 when the input is valid (even if jobs stay unplaced), 2 for invalid input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from railyard.topology.decision import pod_infos
from railyard.topology.documents import InputError, format_validation, load_objects, parse_jobs, require_kind
from railyard.topology.labels import scheme_for
from railyard.topology.nodes import DEVICE_KINDS, Trust, build_snapshot, trust_all
from railyard.topology.planner import plan, plan_json
from railyard.topology.profile import PROFILE_KIND, ClusterProfile, node_objects
from railyard.topology.render import render_table

EXIT_INVALID = 2


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None


def read_nodes(path: str) -> list[dict[str, Any]]:
    """Nodes (a ClusterProfile expands into its nodes), and the ResourceSlices and ResourceClaims of a
    DRA cluster's dump as they are."""
    objects = load_objects(_read(path), path)
    nodes: list[dict[str, Any]] = []
    for index, obj in enumerate(objects, 1):
        if obj.get("kind") in DEVICE_KINDS:
            nodes.append(obj)
        elif obj.get("kind") == PROFILE_KIND:
            # A cluster profile (examples/clusters/) expands into its nodes.
            try:
                nodes.extend(node_objects(ClusterProfile.model_validate(obj), kwok=False))
            except ValidationError as e:
                raise InputError(f"{path}: ClusterProfile (object {index}): {format_validation(e)}") from None
        else:
            nodes.extend(require_kind([obj], ("Node",), f"{path} object {index}"))
    return nodes


def read_cluster(kubeconfig: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Trust]:
    from railyard.operator.app.live import list_nodes_and_pods

    return list_nodes_and_pods(kubeconfig)


def cmd_plan(args: argparse.Namespace) -> int:
    scheme = scheme_for(args.labels, args.levels)
    if args.kubeconfig:
        nodes, pods, trusted = read_cluster(args.kubeconfig)
    elif args.nodes:
        nodes = read_nodes(args.nodes)
        pods = require_kind(load_objects(_read(args.pods), args.pods), ("Pod", *DEVICE_KINDS), args.pods) \
            if args.pods else []
        trusted = trust_all
    else:
        raise InputError("give --nodes NODES.yaml (or --kubeconfig to read a live cluster)")
    devices = [o for o in [*nodes, *pods] if o.get("kind") in DEVICE_KINDS]
    nodes = [o for o in nodes if o.get("kind") not in DEVICE_KINDS]
    pods = [o for o in pods if o.get("kind") not in DEVICE_KINDS]
    jobs = parse_jobs(load_objects(_read(args.jobs), args.jobs), args.jobs, scheme.levels)
    result = plan(build_snapshot(nodes, pods, scheme, trusted, devices), jobs, pod_infos(pods, trusted),
                  args.defragment)
    if args.output == "json":
        print(json.dumps(plan_json(result)))
    else:
        print(render_table(result))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Where the cluster's TrainingJobs landed, read from their bound pods."""
    from railyard.operator.app.live import live_placements

    result = live_placements(args.kubeconfig, scheme_for(args.labels, args.levels), args.namespace)
    print(render_table(result))
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from railyard.operator.app.display import job_rows, render_jobs
    from railyard.operator.app.live import list_jobs

    rows = job_rows(list_jobs(args.kubeconfig, args.namespace))
    print(json.dumps(rows) if args.output == "json" else render_jobs(rows))
    return 0


def cmd_topology(args: argparse.Namespace) -> int:
    from railyard.operator.app.display import render_topology
    from railyard.operator.app.live import cluster_topology

    view = cluster_topology(args.kubeconfig, scheme_for(args.labels, args.levels))
    print(json.dumps(view) if args.output == "json" else render_topology(view, colour=sys.stdout.isatty()))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from railyard.operator.app.display import render_explanation
    from railyard.operator.app.live import explain_job

    info = explain_job(args.kubeconfig, scheme_for(args.labels, args.levels), args.namespace, args.job)
    print(json.dumps(info) if args.output == "json" else render_explanation(info))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from railyard.operator.bench.run import run_bench

    print(json.dumps(run_bench(quick=args.quick), indent=2))
    return 0


def cmd_operator(args: argparse.Namespace) -> int:
    from railyard.operator.app.main import run_operator

    return run_operator(verbose=args.verbose)


LEVELS_HELP = "topology levels, top to bottom: name=labelKey,...[,nvlink] (default: the preset's spine,leaf,tor)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="railyard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="where would these TrainingJobs land?")
    p.add_argument("--nodes", help="Node objects (kubectl get nodes -o yaml) or a ClusterProfile")
    p.add_argument("--pods", help="Pod objects already using GPUs (kubectl get pods -A -o yaml)")
    p.add_argument("--jobs", required=True, help="TrainingJob manifests, planned in file order")
    p.add_argument("--output", "-o", choices=("table", "json"), default="table")
    p.add_argument("--labels", default="native", help="label preset(s), e.g. native, aws, gke, topograph, aws,gfd")
    p.add_argument("--levels", help=LEVELS_HELP)
    p.add_argument("--kubeconfig", help="read nodes and pods from this cluster instead of files")
    p.add_argument("--defragment", action="store_true",
                   help="a job that does not fit moves earlier migratable jobs of the file, as the operator would")
    p.set_defaults(func=cmd_plan)
    st = sub.add_parser("status", help="where TrainingJobs landed (from their bound pods)")
    st.add_argument("--kubeconfig", help="cluster to read (default: $KUBECONFIG)")
    st.add_argument("--namespace", "-n", help="only this namespace")
    st.add_argument("--labels", default="native", help="label preset(s)")
    st.add_argument("--levels", help=LEVELS_HELP)
    st.set_defaults(func=cmd_status)
    for name, func, helptext in (("jobs", cmd_jobs, "placement summary of the cluster's TrainingJobs"),
                                 ("topology", cmd_topology, "TOR x node map of GPUs by job, in rail order"),
                                 ("explain", cmd_explain, "why a TrainingJob waits, per tier and node")):
        c = sub.add_parser(name, help=helptext)
        if name == "explain":
            c.add_argument("job", help="TrainingJob name")
        c.add_argument("--kubeconfig", help="cluster to read (default: $KUBECONFIG)")
        c.add_argument("--namespace", "-n", default="default" if name == "explain" else None)
        c.add_argument("--labels", default="native", help="label preset(s)")
        c.add_argument("--levels", help=LEVELS_HELP)
        c.add_argument("--output", "-o", choices=("table", "json"), default="table")
        c.set_defaults(func=func)
    b = sub.add_parser("bench", help="placement benchmark; prints JSON")
    b.add_argument("--quick", action="store_true", help="fewer samples (for smoke tests)")
    b.set_defaults(func=cmd_bench)
    o = sub.add_parser("operator", help="run the operator (Kopf, all namespaces; leader-elected)")
    o.add_argument("--verbose", "-v", action="store_true")
    o.set_defaults(func=cmd_operator)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (InputError, ValueError) as e:
        print(f"railyard {args.command}: error: {e}", file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
