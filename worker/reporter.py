"""Progress and checkpoint reports from a rank to the operator.

Every report carries the rank's recent step samples and its most recent saved checkpoints, so the
operator can rebuild its view after it restarts (nothing is lost when one report is). Transport:
HTTP POST to RAILYARD_REPORT_URL with the pod's projected service-account token, or one JSON line
per report appended to RAILYARD_REPORT_FILE. Reporting never stops training: failures are logged
(at most once a minute) and the data goes out with the next report.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
import urllib.error
import urllib.request
from collections import deque
from typing import Any

from railyard.worker.context import Context

log = logging.getLogger("railyard.worker")

MAX_SAMPLES = 64  # step samples per report; older ones are dropped when reports cannot be sent


class ReportError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"report refused ({status}): {message}")
        self.status = status


class Reporter:
    def __init__(self, ctx: Context, min_interval: float = 5.0, timeout: float = 5.0, keep_checkpoints: int = 4,
                 clock: Any = time.monotonic) -> None:
        self.ctx = ctx
        self.min_interval = min_interval
        self.timeout = timeout
        self._clock = clock
        self._samples: deque[list[float]] = deque(maxlen=MAX_SAMPLES)
        self._checkpoints: deque[dict[str, Any]] = deque(maxlen=keep_checkpoints)
        self._step: int | None = None
        self._last_sent = float("-inf")
        self._last_warning = float("-inf")
        self.directives: dict[str, Any] = {}  # what the operator asked for last (e.g. a checkpoint)
        self.stale = False  # the operator says this rank belongs to an older attempt
        self.sent = 0

    @property
    def enabled(self) -> bool:
        """One reporter per pod: under torchrun only local rank 0 sends (the others' calls are no-ops)."""
        return bool(self.ctx.report_url or self.ctx.report_file) and self.ctx.local_rank == 0

    def progress(self, step: int, compute_seconds: float | None = None, step_seconds: float | None = None) -> bool:
        """Record one finished step. `compute_seconds`: this rank's time before the blocking collective
        (what straggler detection scores); `step_seconds`: the whole step. Sent at most every
        `min_interval` seconds; True when a report went out."""
        self._step = step
        self._samples.append([step, -1.0 if compute_seconds is None else compute_seconds,
                              -1.0 if step_seconds is None else step_seconds])
        if self._clock() - self._last_sent < self.min_interval:
            return False
        return self.flush()

    def checkpoint_saved(self, step: int, path: str) -> bool:
        """This rank finished writing its part of the checkpoint of `step`; reported at once, retried
        briefly when the operator is busy (429) or between leaders (503): the process may be about
        to exit after a SIGTERM, and this report is what a restart resumes from."""
        self._checkpoints.append({"step": step, "path": path})
        self._step = max(self._step or 0, step)
        return self.flush(retries=3)

    def checkpoint_requested(self, step: int) -> bool:
        """The operator asked every rank to save this step (before evicting a straggler or resizing):
        check after each step and save when True. A rank that learns of the request only after that
        step has passed does not save; the operator then restarts from the last committed step."""
        target = (self.directives.get("checkpoint") or {}).get("step")
        return target is not None and step == target

    def payload(self) -> dict[str, Any]:
        return {
            "namespace": self.ctx.namespace, "job": self.ctx.job, "rank": self.ctx.rank,
            "restartCount": self.ctx.restart_count, "step": self._step,
            "samples": list(self._samples), "checkpoints": list(self._checkpoints), "sentAt": time.time(),
        }

    def flush(self, retries: int = 0, backoff: float = 0.5) -> bool:
        """Send what is pending now; `retries` more attempts (doubling waits) on 429, 503 or a
        network error."""
        if not self.enabled:
            return False
        for attempt in range(retries + 1):
            self._last_sent = self._clock()
            try:
                answer = self._send(self.payload())
                break
            except ReportError as e:
                if e.status == 409:
                    self.stale = True
                if e.status not in (429, 503) or attempt == retries:
                    self._warn(str(e))
                    return False
            except (OSError, ValueError) as e:
                if attempt == retries:
                    self._warn(f"report not sent: {e}")
                    return False
            time.sleep(backoff * 2 ** attempt)
        self._samples.clear()
        self.directives = answer.get("directives") or {}
        self.sent += 1
        return True

    def _warn(self, message: str) -> None:
        if self._clock() - self._last_warning >= 60:
            self._last_warning = self._clock()
            log.warning("railyard: %s", message)

    def _send(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        if not self.ctx.report_url:
            assert self.ctx.report_file
            with open(self.ctx.report_file, "ab") as f:  # one write per line: appends stay whole
                f.write(data + b"\n")
            return {}
        with open(self.ctx.token_file) as f:  # re-read each time: kubelet rotates projected tokens
            token = f.read().strip()
        request = urllib.request.Request(self.ctx.report_url, data=data, method="POST", headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {token}"})
        context = ssl.create_default_context(cafile=self.ctx.report_ca_file) \
            if self.ctx.report_url.startswith("https:") else None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            raise ReportError(e.code, e.read().decode(errors="replace")[:300]) from None
        return json.loads(raw) if raw else {}
