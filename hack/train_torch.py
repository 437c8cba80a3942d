#!/usr/bin/env python3
"""`make train-torch`: the PyTorch example (examples/train/torch_train.py) under torchrun, 2 processes
on CPU with gloo: run, SIGTERM (both processes save the same step), resume from the step the report
file recorded, finish. Prints a JSON summary; exits 1 if the resume did not start after that step.

Opt-in, outside `make test`: torch from PyPI is the ~3 GB CUDA build. It is installed once into
~/.cache/railyard/torch-venv (RAILYARD_TORCH_VENV to use another)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("RAILYARD_TORCH_VENV", Path.home() / ".cache" / "railyard" / "torch-venv"))
SCRIPT = REPO / "examples" / "train" / "torch_train.py"


def ensure_venv() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    if subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0:
        print("[train-torch] pip install torch (about 3 GB, once)", file=sys.stderr)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch"], check=True)
    # railyard.worker is standard library only: put the repo's worker/ on the path as railyard.worker.
    shim = VENV / "railyard-shim" / "railyard"
    shim.mkdir(parents=True, exist_ok=True)
    link = shim / "worker"
    if not link.exists():
        link.symlink_to(REPO / "worker")
    return VENV / "bin" / "torchrun"


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def run(torchrun: Path, work: Path, name: str, extra_env: dict[str, str], steps: int,
        stop_after: float | None) -> tuple[int, list[dict], float]:
    env = {**os.environ, "PYTHONPATH": str(VENV / "railyard-shim"), "OMP_NUM_THREADS": "1",
           "RAILYARD_RANK": "0", "RAILYARD_REPLICAS": "1", "RAILYARD_JOB_NAME": "torch-demo",
           "RAILYARD_REPORT_FILE": str(work / "reports.jsonl"), "RAILYARD_CHECKPOINT_PATH": str(work / "ckpt"),
           **extra_env}
    out = work / f"{name}.out"
    started = time.monotonic()
    with out.open("w") as f:
        proc = subprocess.Popen([str(torchrun), "--standalone", "--nproc-per-node", "2", str(SCRIPT),
                                 "--steps", str(steps), "--checkpoint-every", "50", "--step-sleep", "0.01"],
                                env=env, stdout=f, stderr=subprocess.STDOUT)
        if stop_after is not None:
            deadline = time.monotonic() + 300
            while not any(e["event"] == "checkpoint" for e in events(out)) and time.monotonic() < deadline:
                time.sleep(0.2)  # first checkpoint written: the job is really training
            time.sleep(stop_after)
            proc.send_signal(signal.SIGTERM)  # torchrun forwards it to its workers
        code = proc.wait(600)
    return code, events(out), time.monotonic() - started


def main() -> int:
    torchrun = ensure_venv()
    work = Path(tempfile.mkdtemp(prefix="railyard-torch-"))
    code1, first, secs1 = run(torchrun, work, "first", {}, 100_000, stop_after=2.0)
    reports = [json.loads(line) for line in (work / "reports.jsonl").read_text().splitlines()]
    saved = max((c for r in reports for c in r["checkpoints"]), key=lambda c: c["step"])
    stop_events = [e for e in first if e["event"] == "stop"]
    stops = {e["step"] for e in stop_events}
    code2, second, secs2 = run(torchrun, work, "second", {
        "RAILYARD_RESTART_COUNT": "1", "RAILYARD_RESUME_STEP": str(saved["step"]),
        "RAILYARD_RESUME_CHECKPOINT": saved["path"]}, saved["step"] + 101, stop_after=None)
    starts = {e["first_step"] for e in second if e["event"] == "start"}
    done = [e for e in second if e["event"] == "done"]
    # torchrun itself exits 1 on SIGTERM (SignalException) after its workers stopped; what matters is
    # that both workers agreed on a step, saved it and reported it.
    summary = {"work_dir": str(work), "torchrun_exit_after_sigterm": code1, "workers_stopped": len(stop_events),
               "stopped_at": sorted(stops), "reported_step": saved["step"],
               "resumed_at": sorted(starts), "second_exit": code2, "final_loss": done[0]["loss"] if done else None,
               "seconds": [round(secs1, 1), round(secs2, 1)]}
    print(json.dumps(summary))
    ok = len(stop_events) == 2 and stops == {saved["step"]} and starts == {saved["step"] + 1}
    ok = ok and code2 == 0 and len(done) == 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
