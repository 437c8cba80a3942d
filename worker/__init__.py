"""`railyard.worker`: what a training script running in a Railyard pod calls. Standard library only
(never imports torch), so it works in any training image and in tests without GPUs.

    from railyard import worker

    ctx = worker.context()                      # rank, world size, restart count, resume step ...
    reporter = worker.Reporter(ctx)
    stop = worker.StopFlag.install()            # SIGTERM -> save, then exit
    for step in range(ctx.first_step, steps):  # load ctx.resume_checkpoint first when ctx.resuming
        ...                                     # compute, then the collective
        reporter.progress(step, compute_seconds=c)
        if step % 100 == 0 or stop.requested:
            save(step); reporter.checkpoint_saved(step, path)
        if stop.requested:
            break
"""

from railyard.worker.context import Context, context
from railyard.worker.reporter import Reporter, ReportError
from railyard.worker.shutdown import StopFlag

__all__ = ["Context", "ReportError", "Reporter", "StopFlag", "context"]
