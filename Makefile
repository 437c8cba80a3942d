# The two commands: `make demo` (bring up the local cluster and show it) and `make test` (everything).
# Both install what they need on a fresh machine (venv + pip, apt-get when missing, Go builds).
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help deps demo worker-wheel test lint unit e2e build cluster-up cluster-down bench client-bench plan train-torch compare goodput soak preemption defrag reservation-bench backfill-bench spares

help:
	@echo "make demo   - build the control plane, start it with simulated GPU nodes, show them"
	@echo "make test   - lint, unit, integration and e2e tests against the local control plane"
	@echo "make bench  - placement benchmark (JSON)"
	@echo "make compare - Railyard next to the gang schedulers on the rig: a burst, then a living cluster"
	@echo "make goodput - goodput under Llama 3's failure mix (JSON); make soak - a fault a minute for 30 min"
	@echo "make preemption - force-fit: victims and GPU-hours lost, Railyard vs evict-the-youngest (JSON)"
	@echo "make defrag / make spares - a fragmenting stream, and replacements with full TORs (JSON)"
	@echo "make reservation-bench - starvationSeconds on the living stream, simulated (JSON)"
	@echo "make backfill-bench - backfill on declared time limits, living stream simulated (JSON)"
	@echo "  (each writes bench-NAME.json here; docs/benchmarks.md shows docs/results/, see the Makefile to refresh)"

deps:
	@hack/deps.sh

# Only what the demo uses: no real-node packages, no helm, kubelet or CoreDNS builds.
demo:
	@hack/deps.sh --demo
	@hack/demo.sh

# railyard-worker's wheel (standard library only) for training images: dist/railyard_worker-*.whl
worker-wheel: deps
	.venv/bin/python -m pip wheel --no-deps --quiet worker/ -w dist/
	@ls dist/railyard_worker-*.whl

test:
	@hack/test.sh

lint: deps
	.venv/bin/ruff check .
	.venv/bin/lint-imports
	hack/typecheck.sh

unit: deps
	.venv/bin/pytest tests/unit

e2e: deps
	.venv/bin/pytest tests/integration tests/e2e

build:
	@hack/build-binaries.sh

cluster-up: deps
	.venv/bin/python hack/cluster.py up

# The venv's Python when there is one: a running real node's pods are deleted through the API (the kubernetes
# client); without a venv nothing of ours can be running but the processes, which plain python3 stops.
cluster-down:
	$(if $(wildcard .venv/bin/python),.venv/bin/python,python3) hack/cluster.py down

# Opt-in: the PyTorch example under torchrun (CPU, gloo); installs torch (~3 GB) once into ~/.cache/railyard.
train-torch:
	python3 hack/train_torch.py

# The benchmarks (hack/bench): one entry point, `python -m bench NAME` (`python -m bench` lists them).
# Each target writes its JSON to bench-NAME.json here (git-ignored). The figures docs/benchmarks.md shows are
# docs/results/NAME.json: to refresh one, run the target, copy its JSON over the result (RESULT= below says
# where), then run hack/gen_docs.py, which rewrites the page's table from docs/results/ (its --check fails
# when a headline figure's key is gone: hack/gen_docs.py HEADLINES). A target without RESULT= has no result
# kept in docs/results/.
BENCH := PYTHONPATH=hack .venv/bin/python -m bench

bench: deps
	$(BENCH) placement | tee bench-placement.json

# Goodput under Llama 3's failure mix on a fresh superpod-2k rig (restarts the local rig; ~15 min), and
# the 30-minute soak (a fault a minute; exits 1 on a double-booked GPU, a partial gang or a restart of
# a job no fault touched). Neither is part of `make test`.
# RESULT=docs/results/goodput.json (make goodput), RESULT=docs/results/soak.json (make soak)
goodput: deps build
	$(BENCH) goodput | tee bench-goodput.json

soak: deps build
	$(BENCH) goodput --soak | tee bench-soak.json

# RESULT=docs/results/preemption.json
preemption: deps
	$(BENCH) preemption | tee bench-preemption.json

# RESULT=docs/results/defrag.json
defrag: deps
	$(BENCH) defrag | tee bench-defrag.json

# The starvation threshold on the living stream, simulated on the pure core (docs/placement.md, why 90 s)
# RESULT=docs/results/reservation.json
# RESERVATION_ARGS: more options, e.g. --seeds 11-20 --thresholds 90 --set RAILYARD_SMALL_JOB_GPUS=8
reservation-bench: deps
	$(BENCH) reservation $(RESERVATION_ARGS) | tee bench-reservation.json

# Backfill into reservations on declared limits, the living stream simulated with and without limits
# (docs/placement.md, "Backfill on declared run times"). RESULT=docs/results/backfill.json
backfill-bench: deps
	$(BENCH) backfill | tee bench-backfill.json

# 12,288 kwok nodes, empty then with 100,000 pods, a node of a 1,024-replica gang lost three ways (restarts the local rig). RESULT=docs/results/scale.json
scale-bench: deps build
	$(BENCH) scale | tee bench-scale.json

# The operator's burst with the device plugin, then with DRA claims (restarts the local rig twice).
# RESULT=docs/results/dra.json
dra-bench: deps build
	$(BENCH) dra | tee bench-dra.json

# CPU per API request, the placer's async transport against the official client's pool (the cluster in
# $KUBECONFIG, or start one with `make cluster-up`)
client-bench: deps
	$(BENCH) client | tee bench-client.json

# RESULT=docs/results/spares.json. Its live half, docs/results/spares-live.json, has no target: the recovery
# benchmark run twice on fresh rigs, `$(BENCH) recovery` then `RAILYARD_SPARES_PER_TOR=1 $(BENCH) recovery`,
# their final JSON's "cases" as "without_spares" and "with_one_spare_per_tor".
spares: deps
	$(BENCH) spares | tee bench-spares.json

# Railyard next to kube-scheduler 1.36 gang scheduling, Kueue TAS, Volcano and a naive podAffinity
# baseline, each on a fresh superpod-2k rig (restarts the local rig): the burst (~15 min), then the
# living cluster (COMPARE_LIVING_SECONDS per peer, default 1200, then up to COMPARE_LIVING_SETTLE_SECONDS,
# default 300, until the run's jobs' p99 wait is decided: ~2.5 h for five). COMPARE_MODE=burst|living
# runs one; COMPARE_LIMIT_SHARE=0.5 has half the living stream's jobs declare time limits (Railyard's peers
# send them, the others have no such field). JSON here, the tables in compare.md and compare-living.md, the
# plots in docs/results/.
# RESULT=docs/results/compare-living.json: the JSON of `COMPARE_MODE=living make compare` without its "# "
# progress lines (`grep -v '^#' bench-compare.json`); the burst's JSON is not kept in docs/results/.
compare: deps build
	.venv/bin/python -m pip install -q -e '.[compare]'
	COMPARE_OUT=compare.md COMPARE_PLOT=docs/results/compare.png COMPARE_LIVING_OUT=compare-living.md \
		COMPARE_LIVING_PLOT=docs/results/compare-living.png $(BENCH) compare | tee bench-compare.json
