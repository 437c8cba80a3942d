#!/usr/bin/env bash
# mypy over the railyard package, the tests' support code (the in-memory FakeApi is checked against the
# protocol the actors program against), the benchmarks (hack/bench, with the hack/ modules they import), the docs
# generator (hack/gen_docs.py) and the rig's real node with its host record (hack/realnode.py, hack/host_record.py).
# The editable install maps topology/, operator/ and worker/ to railyard.* through an import hook that type
# checkers cannot follow, so mypy reads a symlinked tree instead.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=.venv/typecheck/railyard
mkdir -p "$tree"
ln -sfn "$PWD/topology" "$tree/topology"
ln -sfn "$PWD/operator" "$tree/operator"
ln -sfn "$PWD/worker" "$tree/worker"
MYPYPATH=.venv/typecheck:hack exec .venv/bin/mypy -p railyard.topology -p railyard.operator -p railyard.worker \
  -p tests.support -p bench -m gen_docs -m realnode -m host_record "$@"
