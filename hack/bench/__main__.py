"""`python -m bench NAME [ARGS]`: runs one benchmark (`python -m bench` lists them)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    # the pure core
    "placement": ("bench.core.placement", "solve time and quality of the placement solver (JSON)"),
    "reservation": ("bench.core.reservation", "starvationSeconds on the living stream, simulated"),
    "backfill": ("bench.core.backfill", "backfill into reservations on declared limits, living stream, simulated"),
    "defrag": ("bench.core.defrag", "a fragmenting stream with and without defragmentation, simulated"),
    "spares": ("bench.core.spares", "replacements with full TORs, with and without hot spares, simulated"),
    "preemption": ("bench.core.preemption", "victims and GPU-hours lost: Railyard vs evict-the-youngest"),
    "stragglers": ("bench.core.stragglers", "straggler detection on simulated report streams"),
    "ab": ("bench.ab", "A/B of the placement benchmark between two checkouts, in turns"),
    # the live rig
    "operator": ("bench.rig.operator", "the operator's burst against plain Jobs through kube-scheduler"),
    "goodput": ("bench.rig.goodput", "goodput under Llama 3's failure mix (--soak: a fault a minute)"),
    "scale": ("bench.rig.scale", "a 1,024-replica gang's recovery on 12,288 nodes"),
    "recovery": ("bench.rig.recovery", "time from a lost node to the gang running again"),
    "reports": ("bench.rig.reports", "the report endpoint under a flood of workers"),
    "elastic": ("bench.rig.elastic", "shrink and grow of an elastic gang"),
    "dra": ("bench.rig.dra", "the burst with DRA claims pinning every GPU and NIC"),
    "client": ("bench.rig.client", "CPU per API request: the async transport against the official client"),
    "control-plane": ("bench.rig.control_plane", "the rig's control-plane memory and node creation"),
    # the peers
    "compare": ("bench.peers.compare", "Railyard next to the gang schedulers on the rig (make compare)"),
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHMARKS:
        width = max(map(len, BENCHMARKS))
        print("usage: python -m bench NAME [ARGS]\n", file=sys.stderr)
        for name, (_, what) in BENCHMARKS.items():
            print(f"  {name:<{width}}  {what}", file=sys.stderr)
        return 0 if not argv else 2
    sys.argv = [f"bench {argv[0]}", *argv[1:]]  # before the import: some read their flags at import time
    module = importlib.import_module(BENCHMARKS[argv[0]][0])
    return int(module.main() or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
