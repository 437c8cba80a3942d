"""Save on fault at the rank (issue 47): a rank names the shards it holds with the operator's own layout, so what one
survivor saved is found by whichever rank holds that shard in the next attempt; the worker saves again when asked
for more shards; the example trainer's save and resume go through it."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from railyard.topology.api.job import Parallelism
from railyard.topology.solver.commgraph import Layout
from railyard.topology.solver.shard_cover import cover
from railyard.worker import Reporter, context

REPO = Path(__file__).resolve().parents[2]


def _ctx(rank: int, replicas: int, gpus: int, tensor: int, pipeline: int, **env: str):
    return context({"RAILYARD_RANK": str(rank), "RAILYARD_REPLICAS": str(replicas),
                    "RAILYARD_GPUS_PER_REPLICA": str(gpus), "RAILYARD_TENSOR_PARALLEL": str(tensor),
                    "RAILYARD_PIPELINE_PARALLEL": str(pipeline), **env})


@st.composite
def layouts(draw):
    tensor, pipeline = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 3, 4]))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    replicas = draw(st.integers(1, 12))
    layout = Layout.of(replicas, gpus, Parallelism(tensor=tensor, pipeline=pipeline))
    return (layout, replicas) if layout is not None else None


@settings(max_examples=300, deadline=None)
@given(layouts(), st.data())
def test_every_rank_names_the_shard_the_operator_assigns_it(drawn, data):
    if drawn is None:
        return
    layout, replicas = drawn
    lost = frozenset(data.draw(st.sets(st.integers(0, replicas - 1))))
    shards = cover(layout, replicas, lost)
    for rank in range(replicas):
        ctx = _ctx(rank, replicas, layout.gpus_per_replica, layout.tensor, layout.pipeline)
        for local in range(layout.gpus_per_replica):
            assert ctx.shard(local) == shards.shard_of(rank, local, layout)
    if shards.covered:
        # What the savers write is every shard any rank of the next attempt (same layout) will look for.
        saved = {_ctx(r, replicas, layout.gpus_per_replica, layout.tensor, layout.pipeline).shard_name(local)
                 for r, locals_ in shards.savers.items() for local in locals_}
        wanted = {_ctx(r, replicas, layout.gpus_per_replica, layout.tensor, layout.pipeline).shard_name(local)
                  for r in range(replicas) for local in range(layout.gpus_per_replica)}
        assert saved == wanted
        assert sum(len(x) for x in shards.savers.values()) == len(wanted), "each shard saved once"


def test_a_saver_asked_for_more_shards_saves_again_and_says_which(tmp_path):
    ctx = context({"RAILYARD_RANK": "1", "RAILYARD_RESTART_COUNT": "0",
                   "RAILYARD_REPORT_FILE": str(tmp_path / "reports")})
    reporter = Reporter(ctx, background=False)
    calls: list[list[int]] = []
    done = threading.Event()

    def save(local: list[int]) -> tuple[int, str]:
        calls.append(local)
        done.set()
        return 7, "/c/7"

    reporter.on_fault_save(save)

    def ask(local: list[int]) -> None:
        done.clear()
        reporter.directives = {"faultSave": {"restartCount": 0, "savers": {"1": local}}}
        reporter._answer_fault_save()
        assert done.wait(5)

    ask([1])
    deadline = time.monotonic() + 5
    while reporter.payload().get("faultSave") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reporter.payload()["faultSave"] == {"step": 7, "path": "/c/7", "localRanks": [1]}
    reporter._answer_fault_save()  # asked the same again: nothing new to save
    ask([0, 1])
    deadline = time.monotonic() + 5
    while reporter.payload()["faultSave"]["localRanks"] != [0, 1] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls == [[1], [0, 1]]
    assert reporter.payload()["faultSave"]["localRanks"] == [0, 1]


def _example_trainer():
    spec = importlib.util.spec_from_file_location("example_train", REPO / "examples" / "train" / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_trainer_saves_its_last_step_on_fault_and_any_rank_resumes_from_it(tmp_path, capsys):
    train = _example_trainer()
    survivor = _ctx(2, 4, 1, 1, 1, RAILYARD_CHECKPOINT_PATH=str(tmp_path))
    last = train.LastStep(survivor)
    assert last.save([0]) is None, "no step completed in this attempt: nothing to save"
    last.completed(41, [0.1, 0.2, 0.3, 0.4])
    step, path = last.save([0])
    assert (step, Path(path)) == (41, tmp_path / "step-41")
    # The next attempt: rank 0 (a new pod on another node) holds the same, only, shard.
    fresh = _ctx(0, 4, 1, 1, 1, RAILYARD_CHECKPOINT_PATH=str(tmp_path), RAILYARD_RESUME_STEP="41",
                 RAILYARD_RESUME_CHECKPOINT=path, RAILYARD_RESTART_COUNT="1")
    assert train.load(fresh) == [0.1, 0.2, 0.3, 0.4]
    assert '"event": "saved_on_fault"' in capsys.readouterr().out
