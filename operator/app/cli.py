"""`railyard` (also `kubectl railyard`): where jobs would land and where they did, as kubectl users expect.

    railyard plan --jobs JOBS.yaml [--jobs ...] (--nodes NODES.yaml [--pods PODS.yaml] | --live)
    railyard status   [-n NS | -A]         where TrainingJobs landed, drawn from their bound pods
    railyard jobs     [-n NS | -A]         placement summary
    railyard topology                      TORs x nodes, each GPU in rail order marked by the job holding it
    railyard explain JOB [-n NS]           why a job waits, and what to do
    railyard operator                      run the operator

Live commands take kubectl's --kubeconfig, --context, -n/--namespace (default: the context's) and -A, and
-o table|json|yaml. They read node labels as the operator in the cluster does (from its Lease); --labels and
--levels override that.

Exit codes: 0 done; 1 `plan --fail-unplaced` and a job does not fit; 2 invalid input (flags, files, specs);
3 the cluster could not be reached or refused (kubeconfig, context, server, permissions); 4 the named
TrainingJob does not exist. Errors are one line on stderr (RAILYARD_DEBUG=1 adds the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from railyard.operator.app.terminal import Progress
from railyard.topology.cluster.labels import LabelScheme, scheme_for
from railyard.topology.cluster.nodes import DEVICE_KINDS
from railyard.topology.planner.documents import InputError, format_validation, load_objects, parse_jobs, require_kind
from railyard.topology.planner.profile import PROFILE_KIND, ClusterProfile, node_objects


class ExitCode:
    OK = 0
    UNPLACED = 1
    INVALID = 2
    CLUSTER = 3
    NOT_FOUND = 4
    INTERNAL = 70  # a bug: EX_SOFTWARE


EXIT_INVALID = ExitCode.INVALID  # kept for callers of the planner's contract
OUTPUTS = ("table", "json", "yaml")


def _version() -> str:
    try:
        return metadata.version("railyard")
    except metadata.PackageNotFoundError:
        return "unknown"


def emit(data: Any, output: str, table: Callable[[], str]) -> None:
    if output == "json":
        print(json.dumps(data))
    elif output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False), end="")
    else:
        print(table())


# --- inputs --------------------------------------------------------------------------------------------

def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None


def _files(paths: Sequence[str]) -> list[str]:
    """Files as given, a directory's *.yaml/*.yml/*.json in name order (as `kubectl apply -f DIR`)."""
    out: list[str] = []
    for path in paths:
        if Path(path).is_dir():
            out += sorted(str(p) for p in Path(path).iterdir() if p.suffix in (".yaml", ".yml", ".json"))
        else:
            out.append(path)
    return out


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


def _cluster(args: argparse.Namespace):
    from railyard.operator.app.live import connect

    cluster = connect(args.kubeconfig, args.context, args.progress)
    args.server = cluster.server  # named by a failure's one line
    return cluster


def _scheme(args: argparse.Namespace, cluster: Any | None) -> LabelScheme:
    """--labels/--levels when given; else what the operator in the cluster reads nodes with; else native."""
    if args.labels is not None or args.levels is not None or cluster is None:
        return scheme_for(args.labels or "native", args.levels)
    from railyard.operator.app.live import LEASE_NAMESPACES, operator_topology

    found = operator_topology(cluster, [args.operator_namespace] if args.operator_namespace else LEASE_NAMESPACES)
    if found is None:
        where = args.operator_namespace or " or ".join(LEASE_NAMESPACES)
        print(f"railyard: no operator Lease readable in {where}: node labels read with the native preset "
              "(--labels/--levels, or --operator-namespace, choose)", file=sys.stderr)
        return scheme_for("native", None)
    return scheme_for(*found)


def _namespace(args: argparse.Namespace, cluster: Any) -> str | None:
    """None: every namespace (-A)."""
    return None if getattr(args, "all_namespaces", False) else (args.namespace or cluster.namespace)


# --- commands ------------------------------------------------------------------------------------------

def cmd_plan(args: argparse.Namespace) -> int:
    from railyard.operator.app.planning import plan_in_queue_order
    from railyard.topology.planner.plan import plan_json
    from railyard.topology.planner.render import render_table
    from railyard.topology.planner.workloads import as_trainingjobs

    objects = [(obj, path) for path in _files(args.jobs) for obj in load_objects(_read(path), path)]
    classes = [o for o, _ in objects if o.get("kind") == "PriorityClass"]
    cluster = None
    if args.live or args.kubeconfig or args.context:
        if args.nodes or args.pods:
            raise InputError("--nodes/--pods read files; --live (or --kubeconfig/--context) reads the cluster: "
                             "give one or the other")
        from railyard.operator.app.live import list_nodes_and_pods, priority_classes

        cluster = _cluster(args)
        nodes, pods, trusted = list_nodes_and_pods(cluster)
        classes += priority_classes(cluster)
    elif args.nodes:
        from railyard.topology.cluster.nodes import trust_all

        nodes = read_nodes(args.nodes)
        pods = require_kind(load_objects(_read(args.pods), args.pods), ("Pod", *DEVICE_KINDS), args.pods) \
            if args.pods else []
        trusted = trust_all
    else:
        raise InputError("give --nodes NODES.yaml (a dump or a ClusterProfile), or --live to read the cluster")
    scheme = _scheme(args, cluster)
    jobs = []
    for path in dict.fromkeys(p for _, p in objects):
        mine, left_out = as_trainingjobs([o for o, p in objects if p == path and o.get("kind") != "PriorityClass"],
                                         scheme.tier_of_label())
        for note in left_out:
            print(f"railyard plan: {path}: {note}", file=sys.stderr)
        jobs += parse_jobs(mine, path, scheme.levels)
    args.progress(f"planning {len(jobs)} jobs")
    result = plan_in_queue_order(nodes, pods, trusted, scheme, jobs, classes, args.defragment)
    args.progress.done()
    emit(plan_json(result), args.output, lambda: render_table(result))
    unplaced = [d for d in result.decisions if d.placement is None]
    return ExitCode.UNPLACED if args.fail_unplaced and unplaced else ExitCode.OK


def cmd_status(args: argparse.Namespace) -> int:
    """Where the cluster's TrainingJobs landed, read from their bound pods."""
    from railyard.operator.app.live import live_placements
    from railyard.topology.planner.plan import plan_json
    from railyard.topology.planner.render import render_table

    cluster = _cluster(args)
    result = live_placements(cluster, _scheme(args, cluster), _namespace(args, cluster))
    args.progress.done()
    emit(plan_json(result), args.output, lambda: render_table(result))
    return ExitCode.OK


def cmd_jobs(args: argparse.Namespace) -> int:
    from railyard.operator.app.display import job_rows, render_jobs
    from railyard.operator.app.live import list_jobs

    cluster = _cluster(args)
    rows = job_rows(list_jobs(cluster, _namespace(args, cluster)))
    args.progress.done()
    emit(rows, args.output, lambda: render_jobs(rows))
    return ExitCode.OK


def cmd_topology(args: argparse.Namespace) -> int:
    from railyard.operator.app.display import render_topology
    from railyard.operator.app.live import cluster_topology

    cluster = _cluster(args)
    view = cluster_topology(cluster, _scheme(args, cluster))
    args.progress.done()
    emit(view, args.output, lambda: render_topology(view, colour=sys.stdout.isatty()))
    return ExitCode.OK


def cmd_explain(args: argparse.Namespace) -> int:
    from railyard.operator.app.display import render_explanation
    from railyard.operator.app.live import explain_job

    cluster = _cluster(args)
    info = explain_job(cluster, lambda: _scheme(args, cluster), args.namespace or cluster.namespace, args.job)
    args.progress.done()
    emit(info, args.output, lambda: render_explanation(info))
    return ExitCode.OK


def cmd_operator(args: argparse.Namespace) -> int:
    from railyard.operator.app.main import run_operator

    return run_operator(verbose=args.verbose)


# --- the parser ----------------------------------------------------------------------------------------

LEVELS_HELP = ("topology levels, top to bottom: name=labelKey,...[,nvlink] (default: what the operator in the "
               "cluster uses, else the preset's spine,leaf,tor)")


def _cluster_flags(p: argparse.ArgumentParser, namespaced: bool, all_namespaces: bool, lease: bool = True) -> None:
    g = p.add_argument_group("cluster (as kubectl)")
    g.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    g.add_argument("--context", help="kubeconfig context (default: the current one)")
    if namespaced:
        g.add_argument("--namespace", "-n", help="namespace (default: the context's)")
    if all_namespaces:
        g.add_argument("--all-namespaces", "-A", action="store_true", help="every namespace")
    if lease:
        g.add_argument("--operator-namespace", help="where the operator's Lease is (default: kube-system, then "
                                                   "railyard-system): its node label scheme is read from there")


def _reading_flags(p: argparse.ArgumentParser, labels: bool = True) -> None:
    if labels:
        p.add_argument("--labels", help="node label preset(s), e.g. native, aws, gke, topograph, aws,gfd "
                                        "(default: what the operator in the cluster uses)")
        p.add_argument("--levels", help=LEVELS_HELP)
    p.add_argument("--output", "-o", choices=OUTPUTS, default="table", help="output format")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="railyard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"railyard {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("plan", help="where would these TrainingJobs land? (queue order: priority, then age)")
    p.add_argument("--jobs", required=True, action="append",
                   help="TrainingJob manifests (files or directories, repeatable); PriorityClass objects in them "
                        "rank the jobs as the cluster would")
    p.add_argument("--nodes", help="Node objects (kubectl get nodes -o yaml) or a ClusterProfile")
    p.add_argument("--pods", help="Pod objects already using GPUs (kubectl get pods -A -o yaml)")
    p.add_argument("--live", action="store_true", help="read nodes, pods, placements and PriorityClasses from "
                                                       "the cluster instead of files")
    p.add_argument("--defragment", action="store_true",
                   help="a job that does not fit moves earlier migratable jobs, as the operator would")
    p.add_argument("--fail-unplaced", action="store_true", help="exit 1 when a job does not fit")
    _reading_flags(p)
    _cluster_flags(p, namespaced=False, all_namespaces=False)
    p.set_defaults(func=cmd_plan)
    for name, func, helptext, all_ns in (
            ("status", cmd_status, "where TrainingJobs landed, drawn from their bound pods", True),
            ("jobs", cmd_jobs, "placement summary of TrainingJobs", True),
            ("topology", cmd_topology, "TOR x node map of GPUs by job, in rail order", False),
            ("explain", cmd_explain, "why a TrainingJob waits, per tier and node, and what to do", False)):
        c = sub.add_parser(name, help=helptext)
        if name == "explain":
            c.add_argument("job", help="TrainingJob name")
        _reading_flags(c, labels=name != "jobs")
        _cluster_flags(c, namespaced=name != "topology", all_namespaces=all_ns, lease=name != "jobs")
        c.set_defaults(func=func)
    o = sub.add_parser("operator", help="run the operator (all namespaces; leader-elected)")
    o.add_argument("--verbose", "-v", action="store_true")
    o.set_defaults(func=cmd_operator)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.progress = Progress()
    prog = f"railyard {args.command}"
    try:
        return int(args.func(args))
    except InputError as e:
        return _fail(prog, e, ExitCode.INVALID)
    except Exception as e:
        code, message = _classify(e, args)
        if os.environ.get("RAILYARD_DEBUG"):
            traceback.print_exc()
        return _fail(prog, message, code)
    except KeyboardInterrupt:
        args.progress.done()
        return 130
    finally:
        args.progress.done()


def _classify(e: Exception, args: argparse.Namespace) -> tuple[int, object]:
    from railyard.operator.app.live import JobNotFound
    from railyard.operator.kube.client import ClusterAccessError, access_failure

    if isinstance(e, JobNotFound):
        return ExitCode.NOT_FOUND, e
    if isinstance(e, ClusterAccessError):
        return ExitCode.CLUSTER, e
    if isinstance(e, ValueError):
        return ExitCode.INVALID, e
    failure = access_failure(e, getattr(args, "server", None) or "the API server")
    if failure is not None:
        return ExitCode.CLUSTER, failure
    return ExitCode.INTERNAL, f"internal error ({type(e).__name__}: {e}); RAILYARD_DEBUG=1 shows the traceback"


def _fail(prog: str, message: object, code: int) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
