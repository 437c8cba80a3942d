"""Railyard's benchmarks, by what they run against (docs/benchmarks.md has the figures and how to read them):

    core/    the pure core on simulated time or fixed workloads: no cluster (placement, reservation,
             defragmentation, hot spares, preemption)
    rig/     the live local rig (hack/cluster.py) with real operator processes (operator burst, goodput,
             recovery at scale, reports, elastic, stragglers, DRA, the API client, the control plane)
    peers/   Railyard next to kube-scheduler's gang scheduling, Kueue TAS and Volcano on the rig (make compare)

One entry point: `PYTHONPATH=hack .venv/bin/python -m bench NAME [ARGS]` (the Makefile's targets). Every
benchmark prints JSON. Not shipped in the operator's wheel; type-checked by `make lint`; each is run at a tiny
size by tests/unit/test_bench_smoke.py.
"""
