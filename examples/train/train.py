"""A small data-parallel training script on railyard.worker (pure Python: no torch, no numpy).

Linear regression by synchronous SGD: each rank computes the gradient on its own shard, the ranks
average their gradients through a shared directory (a stand-in for the all-reduce NCCL would do),
and every rank applies the same update. It shows the worker contract end to end:
- resume from RAILYARD_RESUME_STEP / RAILYARD_RESUME_CHECKPOINT after a restart;
- report progress (per-rank compute time before the "collective") and saved checkpoints;
- on SIGTERM, all ranks agree on a step (the stop flag rides on the exchange), save it, report it, exit;
- save on fault (`checkpoint.saveOnFault`): when a peer dies without warning, this rank may be blocked in the
  exchange; the operator asks it (on the worker's own thread) to save the last step it completed, as the shard
  file of its layout coordinate, which whichever rank holds that shard in the next attempt loads.

    RANK=0 WORLD_SIZE=2 RAILYARD_CHECKPOINT_PATH=/tmp/ckpt python train.py --exchange /tmp/x --steps 500

Prints one JSON line per event (start, checkpoint, stop, done) on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from railyard import worker

FEATURES = 4
TRUE_WEIGHTS = [0.5, -1.0, 2.0, 0.25]
STOP_WAIT_SECONDS = 2.0  # after SIGTERM, how long a rank still waits for a missing peer's gradients
PEER_STOP_WAIT_SECONDS = 120.0  # a rank stopped by a peer's SIGTERM waits this long for its own end


def shard(rank: int, size: int = 256) -> list[tuple[list[float], float]]:
    rng = random.Random(1000 + rank)
    rows = []
    for _ in range(size):
        x = [rng.uniform(-1, 1) for _ in range(FEATURES)]
        rows.append((x, sum(w * v for w, v in zip(TRUE_WEIGHTS, x, strict=True)) + rng.gauss(0, 0.01)))
    return rows


def gradient(weights: list[float], rows: list[tuple[list[float], float]]) -> tuple[list[float], float]:
    grad = [0.0] * FEATURES
    loss = 0.0
    for x, y in rows:
        err = sum(w * v for w, v in zip(weights, x, strict=True)) - y
        loss += err * err
        for i in range(FEATURES):
            grad[i] += 2 * err * x[i] / len(rows)
    return grad, loss / len(rows)


def emit(event: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")  # one write per line
    sys.stdout.flush()


def write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def exchange(root: Path, step: int, ctx: worker.Context, grad: list[float], stop: worker.StopFlag,
             timeout: float, stop_wait: float = STOP_WAIT_SECONDS) -> tuple[list[float], bool]:
    """Average the gradients of all ranks for this step (and OR their stop flags). A SIGTERM while a peer's
    gradients do not come (it is gone: the gang is being replaced) ends the wait within STOP_WAIT_SECONDS, as a
    collective's watchdog would, so the pod does not hold its node for the whole grace period."""
    here = root / f"g{ctx.restart_count}" / f"step-{step}"
    here.mkdir(parents=True, exist_ok=True)
    write_atomic(here / f"rank-{ctx.rank}.json", {"grad": grad, "stop": stop.requested})
    deadline = time.monotonic() + timeout
    stopping = False
    while True:
        parts = [here / f"rank-{r}.json" for r in range(ctx.world_size)]
        if all(p.exists() for p in parts):
            break
        if stop.requested and not stopping:
            stopping, deadline = True, min(deadline, time.monotonic() + stop_wait)
        if time.monotonic() > deadline:
            emit("peer_lost", step=step)
            sys.exit(3)  # a rank is gone: the operator restarts the gang
        time.sleep(0.002)
    got = [json.loads(p.read_text()) for p in parts]
    # Every rank has read step-2 by now (it wrote step-1 after reading it): drop our old file.
    (root / f"g{ctx.restart_count}" / f"step-{step - 2}" / f"rank-{ctx.rank}.json").unlink(missing_ok=True)
    mean = [sum(g["grad"][i] for g in got) / len(got) for i in range(FEATURES)]
    return mean, any(g["stop"] for g in got)


def save(ctx: worker.Context, step: int, weights: list[float]) -> str:
    base = Path(ctx.checkpoint_path or "checkpoints") / f"step-{step}"
    base.mkdir(parents=True, exist_ok=True)
    write_atomic(base / f"rank-{ctx.rank}.json", {"step": step, "weights": weights})
    return str(base)


def await_word(reporter: worker.Reporter, stop: worker.StopFlag, seconds: float) -> None:
    """Until this rank's own SIGTERM, or the operator saying this attempt is over (a stale report), or `seconds`."""
    deadline = time.monotonic() + seconds
    while reporter.enabled and not stop.requested and not reporter.stale and time.monotonic() < deadline:
        reporter.flush()
        stop.wait(1.0)


def load(ctx: worker.Context) -> list[float]:
    """The weights to resume from: this rank's shard as saved on a fault, else this rank's own file."""
    base = Path(ctx.resume_checkpoint or "")
    mine = base / f"{ctx.shard_name()}.json"
    return json.loads((mine if mine.exists() else base / f"rank-{ctx.rank}.json").read_text())["weights"]


class LastStep:
    """The state after the last completed step, for a save on fault while the loop is blocked in the exchange."""

    def __init__(self, ctx: worker.Context) -> None:
        self.ctx = ctx
        self.done: tuple[int, list[float]] | None = None

    def completed(self, step: int, weights: list[float]) -> None:
        self.done = (step, weights)  # one assignment: the saver's thread sees a whole step or the one before

    def save(self, local_ranks: list[int]) -> tuple[int, str] | None:
        done = self.done
        if done is None:
            return None  # no step completed in this attempt: nothing newer than what it resumed from
        step, weights = done
        base = Path(self.ctx.checkpoint_path or "checkpoints") / f"step-{step}"
        base.mkdir(parents=True, exist_ok=True)
        for local in local_ranks:  # one pure data-parallel process per pod here: its shard is the whole model
            write_atomic(base / f"{self.ctx.shard_name(local)}.json", {"step": step, "weights": weights})
        emit("saved_on_fault", step=step, path=str(base), shards=[self.ctx.shard_name(x) for x in local_ranks])
        return step, str(base)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--exchange", required=True, help="shared directory for the gradient exchange")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds of 'compute' per step")
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--peer-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)

    ctx = worker.context()
    reporter = worker.Reporter(ctx, min_interval=1.0)
    stop = worker.StopFlag.install()
    rows = shard(ctx.rank)
    weights = [0.0] * FEATURES
    if ctx.resuming:
        weights = load(ctx)
    last = LastStep(ctx)
    reporter.on_fault_save(last.save)
    emit("start", rank=ctx.rank, restart_count=ctx.restart_count, resume_step=ctx.resume_step,
         first_step=ctx.first_step)
    loss = float("nan")
    last_step_seconds = 0.0
    for step in range(ctx.first_step, args.steps):
        began = time.perf_counter()
        grad, loss = gradient(weights, rows)
        if args.step_sleep:
            time.sleep(args.step_sleep)
        computed = time.perf_counter() - began
        # A live peer answers within a step or so: wait that long (at least STOP_WAIT_SECONDS) after a SIGTERM.
        stop_wait = max(STOP_WAIT_SECONDS, 3 * last_step_seconds)
        mean, stopping = exchange(Path(args.exchange), step, ctx, grad, stop, args.peer_timeout, stop_wait)
        weights = [w - args.learning_rate * g for w, g in zip(weights, mean, strict=True)]
        last.completed(step, weights)
        if step == ctx.first_step:  # when this attempt's training resumed, with what loss (the restart's cost)
            emit("first_step", step=step, loss=loss, at=time.time(), restart_count=ctx.restart_count)
        last_step_seconds = time.perf_counter() - began
        reporter.progress(step, compute_seconds=computed, step_seconds=last_step_seconds)
        requested = reporter.checkpoint_requested(step)  # before a planned move, eviction or resize
        if stopping or requested or (step + 1) % args.checkpoint_every == 0:
            path = save(ctx, step, weights)
            reporter.checkpoint_saved(step, path)
            emit("checkpoint", step=step, path=path, reported=reporter.enabled)
        if requested:  # the gang restarts from this step: hold rather than compute steps that would be lost
            reporter.hold(step, until=lambda: stop.requested)
            stopping = stopping or stop.requested
        if stopping:
            if not stop.requested:
                # A peer's pod is going, not this one: the operator decides what follows (a restart that keeps this
                # pod, under railyard.worker.supervise, or a SIGTERM); until then this process does not end.
                await_word(reporter, stop, PEER_STOP_WAIT_SECONDS)
            reporter.close()  # the checkpoint saved on SIGTERM is delivered before the process exits
            emit("stop", step=step, loss=loss)
            return 0
        if reporter.stale:
            emit("stale", step=step)  # this attempt was replaced: stop quietly
            return 0
    reporter.close()
    emit("done", step=args.steps - 1, loss=loss, weights=weights)
    return 0


if __name__ == "__main__":
    sys.exit(main())
