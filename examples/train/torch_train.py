"""The PyTorch variant of train.py: DistributedDataParallel on CPU (gloo), launched by torchrun, on
railyard.worker for resume, reports and SIGTERM. Opt-in (`make train-torch`): torch from PyPI is the
~3 GB CUDA build, so it stays out of `make test`.

In a Railyard pod: `torchrun --nnodes=$PET_NNODES --node-rank=$PET_NODE_RANK
--nproc-per-node=$PET_NPROC_PER_NODE --rdzv-endpoint=$PET_MASTER_ADDR:$PET_MASTER_PORT torch_train.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from railyard import worker
from torch.nn.parallel import DistributedDataParallel


def emit(event: str, **fields: object) -> None:
    # One write per line: the processes share torchrun's stdout.
    sys.stdout.write(json.dumps({"event": event, "process": dist.get_rank(), **fields}) + "\n")
    sys.stdout.flush()


class LastStep:
    """Save on fault (`checkpoint.saveOnFault`): when a peer dies without warning this process may be blocked in
    DDP's all-reduce; the worker's thread then saves the state after the last step it completed. The lock keeps
    the save from reading a half-applied optimiser step."""

    def __init__(self, ctx: worker.Context, model: torch.nn.Module, optimiser: torch.optim.Optimizer) -> None:
        self.ctx, self.model, self.optimiser = ctx, model, optimiser
        self.lock = threading.Lock()
        self.step: int | None = None

    def save(self, local_ranks: list[int]) -> tuple[int, str] | None:
        with self.lock:
            if self.step is None:
                return None
            path = Path(self.ctx.checkpoint_path or "checkpoints") / f"step-{self.step}"
            path.mkdir(parents=True, exist_ok=True)
            # DDP: every process holds the whole model, so the one shard is this process's (local rank 0's) state.
            torch.save({"model": self.model.state_dict(), "optimiser": self.optimiser.state_dict()},
                       path / "model.pt.tmp")
            (path / "model.pt.tmp").replace(path / "model.pt")
            emit("saved_on_fault", step=self.step, path=str(path))
            return self.step, str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    args = parser.parse_args(argv)

    dist.init_process_group("gloo")
    ctx = worker.context()
    reporter = worker.Reporter(ctx, min_interval=1.0)
    stop = worker.StopFlag.install()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    if ctx.resuming:
        state = torch.load(Path(ctx.resume_checkpoint or "") / "model.pt", weights_only=True)
        model.module.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
    last = LastStep(ctx, model.module, optimiser)
    reporter.on_fault_save(last.save)  # only local rank 0's reporter is asked (one per pod)
    emit("start", pod_rank=ctx.rank, restart_count=ctx.restart_count, first_step=ctx.first_step)
    generator = torch.Generator().manual_seed(1000 + dist.get_rank())
    truth = torch.tensor([[0.5], [-1.0], [2.0], [0.25]])
    flag = torch.zeros(1)
    for step in range(ctx.first_step, args.steps):
        began = time.perf_counter()
        x = torch.rand(256, 4, generator=generator) * 2 - 1
        loss = torch.nn.functional.mse_loss(model(x), x @ truth)
        if args.step_sleep:
            time.sleep(args.step_sleep)
        computed = time.perf_counter() - began  # before backward, where DDP all-reduces the gradients
        optimiser.zero_grad()
        loss.backward()  # DDP's all-reduce: where a survivor blocks when a peer dies
        with last.lock:
            optimiser.step()
            last.step = step
        # All processes agree on stopping at the same step (a SIGTERM may reach them at different steps).
        flag.fill_(1.0 if stop.requested else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        reporter.progress(step, compute_seconds=computed, step_seconds=time.perf_counter() - began)
        stopping = flag.item() > 0
        if stopping or (step + 1) % args.checkpoint_every == 0:
            path = Path(ctx.checkpoint_path or "checkpoints") / f"step-{step}"
            if dist.get_rank() == 0:
                path.mkdir(parents=True, exist_ok=True)
                torch.save({"model": model.module.state_dict(), "optimiser": optimiser.state_dict()},
                           path / "model.pt")
            dist.barrier()  # saved before anyone reports it
            reporter.checkpoint_saved(step, str(path))
            emit("checkpoint", step=step, path=str(path))
        if stopping:
            emit("stop", step=step, loss=loss.item())
            break
    else:
        emit("done", step=args.steps - 1, loss=loss.item())
    reporter.close()  # what was saved (on SIGTERM too) is delivered before the process exits
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
