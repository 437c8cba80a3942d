"""Progress and checkpoint reports from a rank to the operator.

Every report carries the rank's recent step samples and its most recent saved checkpoints, so the
operator can rebuild its view after it restarts (nothing is lost when one report is). Transport:
HTTP POST to RAILYARD_REPORT_URL with the pod's projected service-account token, or one JSON line
per report appended to RAILYARD_REPORT_FILE.

Reporting never slows a step: `progress` and `checkpoint_saved` only record and queue; a background
thread sends (a checkpoint report is retried until it is delivered, the operator says the attempt is
over, or `close` gives up). A blackholed endpoint costs the training loop nothing but memory, which
is bounded (the newest MAX_SAMPLES samples, the newest `keep_checkpoints` saves). Proxy variables are
ignored for the report URL (the operator is in the cluster; a proxy would see the bearer token).
Call `close()` before the process exits, so a checkpoint saved on SIGTERM is reported.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from typing import Any

from railyard.worker.context import Context

log = logging.getLogger("railyard.worker")

MAX_SAMPLES = 64  # step samples per report; older ones are dropped when reports cannot be sent
RETRY_SECONDS, RETRY_MAX_SECONDS = 0.5, 8.0  # a checkpoint report's retries, doubling


class ReportError(RuntimeError):
    def __init__(self, status: int, message: str, answer: dict[str, Any] | None = None) -> None:
        super().__init__(f"report refused ({status}): {message[:300]}")
        self.status = status
        self.answer = answer or {}  # the endpoint's JSON answer


class Reporter:
    def __init__(self, ctx: Context, min_interval: float = 5.0, timeout: float = 5.0, keep_checkpoints: int = 4,
                 clock: Any = time.monotonic, background: bool = True) -> None:
        self.ctx = ctx
        self.min_interval = min_interval
        self.timeout = timeout
        self.background = background  # False: send on the caller's thread (tests, one-shot tools)
        self._clock = clock
        self._samples: deque[list[float]] = deque(maxlen=MAX_SAMPLES)
        self._checkpoints: deque[dict[str, Any]] = deque(maxlen=keep_checkpoints)
        self._step: int | None = None
        self._last_sent = float("-inf")
        self._last_warning = float("-inf")
        self._lock = threading.Lock()
        self._due = threading.Event()  # something is waiting to be sent
        self._unsent_checkpoint = False  # a save not yet delivered: retried until it is
        self._closing = False
        self._thread: threading.Thread | None = None
        https = bool(ctx.report_url and ctx.report_url.startswith("https:"))
        self._opener = _opener(ctx.report_ca_file if https else None, ctx.report_ca if https else None)
        self.directives: dict[str, Any] = {}  # what the operator asked for last (e.g. a checkpoint)
        self.stale = False  # the operator says this rank belongs to an older attempt
        # ... and, for a pod an in-place restart kept, the new attempt ({"restartCount", "env"}: worker/supervise.py)
        self.next_attempt: dict[str, Any] | None = None
        self.sent = 0
        self._fault_save: Callable[[list[int]], tuple[int, str] | None] | None = None
        self._fault_asked: frozenset[int] = frozenset()  # the local ranks whose save on fault was started
        self._fault_saved: dict[str, Any] | None = None  # {"step", "path", "localRanks"} once saved
        self._unsent_fault = False
        self._saving = threading.Lock()

    @property
    def enabled(self) -> bool:
        """One reporter per pod: under torchrun only local rank 0 sends (the others' calls are no-ops)."""
        return bool(self.ctx.report_url or self.ctx.report_file) and self.ctx.local_rank == 0

    def progress(self, step: int, compute_seconds: float | None = None, step_seconds: float | None = None) -> bool:
        """Record one finished step. `compute_seconds`: this rank's time before the blocking collective
        (what straggler detection scores); `step_seconds`: the whole step. A report is due at most every
        `min_interval` seconds, and at once for an attempt's first step (when training resumed is what a restart
        cost); True when one was sent (or, in the background, queued)."""
        with self._lock:
            first = self._step is None
            self._step = step
            self._samples.append([step, -1.0 if compute_seconds is None else compute_seconds,
                                  -1.0 if step_seconds is None else step_seconds])
        if not first and self._clock() - self._last_sent < self.min_interval:
            return False
        return self._submit()

    def checkpoint_saved(self, step: int, path: str) -> bool:
        """This rank finished writing its part of the checkpoint of `step`: due at once, and retried
        until delivered (this report is what a restart resumes from)."""
        with self._lock:
            self._checkpoints.append({"step": step, "path": path})
            self._step = max(self._step or 0, step)
            self._unsent_checkpoint = True
        return self._submit(retries=3)

    def checkpoint_requested(self, step: int) -> bool:
        """The operator asked every rank to save this step (before evicting a straggler or resizing):
        check after each step and save when True. A rank that learns of the request only after that
        step has passed does not save; the operator then restarts from the last committed step."""
        target = (self.directives.get("checkpoint") or {}).get("step")
        return target is not None and step == target

    def holding(self, step: int) -> bool:
        """The operator asked for a checkpoint of a step this rank has reached and to hold after it (the
        gang is about to restart from it: a further step would be lost)."""
        target = self.directives.get("checkpoint") or {}
        return bool(target.get("hold")) and target.get("step") is not None and step >= target["step"]

    def hold(self, step: int, until: Any = lambda: False, poll_seconds: float = 1.0) -> None:
        """After saving a requested step, wait while `holding(step)` (reporting, so the operator's next
        word arrives): the restart ends it (SIGTERM: `until` turns True, or this attempt goes stale), or
        the request is withdrawn and training goes on."""
        while self.holding(step) and not until() and not self.stale:
            time.sleep(poll_seconds)
            if self.enabled:
                self.flush()

    def on_fault_save(self, save: Callable[[list[int]], tuple[int, str] | None]) -> None:
        """Register what saves the last completed step when a peer is lost without warning (a job with
        `checkpoint.saveOnFault`): `save(local_ranks)` saves the shards those local ranks hold and returns
        (step, path), or None. It runs on its own thread, so it may be called while the training loop is blocked
        in a collective whose peer died; reports then go on without steps (every `min_interval`), so the
        operator's request reaches this rank."""
        self._fault_save = save
        if self.enabled and self.background:
            self._submit()  # the sender starts, and polls from now on

    def payload(self) -> dict[str, Any]:
        with self._lock:
            body = {
                "namespace": self.ctx.namespace, "job": self.ctx.job, "rank": self.ctx.rank,
                "restartCount": self.ctx.restart_count, "step": self._step,
                "samples": list(self._samples), "checkpoints": list(self._checkpoints), "sentAt": time.time(),
            }
            if self._fault_saved is not None:
                body["faultSave"] = dict(self._fault_saved)
            return body

    def _answer_fault_save(self) -> None:
        """The operator asked this rank's shards saved (a peer was lost): save them once, off this thread."""
        asked = self.directives.get("faultSave") or {}
        local = (asked.get("savers") or {}).get(str(self.ctx.rank))
        with self._lock:  # flush runs on the sender's thread and, in hold(), on the training loop's
            # Once per shard set: asked again for more (another saver was lost while saving), it saves them all.
            if self._fault_save is None or local is None or set(local) <= self._fault_asked or \
                    asked.get("restartCount") != self.ctx.restart_count:
                return
            self._fault_asked = self._fault_asked | frozenset(local)
            save = self._fault_save

        def run() -> None:
            try:
                with self._saving:  # a save asked again (for more shards) waits for the one under way
                    saved = save(list(local))
            except Exception as e:  # the operator's wait ends; the restart resumes from the last checkpoint
                log.warning("railyard: save on fault failed: %s", e)
                return
            if saved is not None:
                with self._lock:
                    if self._fault_saved is not None and not set(local) >= set(self._fault_saved["localRanks"]):
                        return  # a save of more shards, asked later, finished first
                    self._fault_saved = {"step": int(saved[0]), "path": str(saved[1]), "localRanks": list(local)}
                    self._unsent_fault = True  # delivered like a checkpoint: retried until it is
                self._submit(retries=3)

        threading.Thread(target=run, name="railyard-save-on-fault", daemon=True).start()

    def close(self, timeout: float = 10.0) -> bool:
        """Deliver what is pending (a checkpoint saved on SIGTERM) within `timeout`, then stop the
        sender. True when nothing was left unsent."""
        if not self.enabled:
            return True
        if self._thread is None:
            return self.flush(retries=3)
        self._closing = True
        self._due.set()
        self._thread.join(timeout)
        return not self._unsent and not self._thread.is_alive()

    def _submit(self, retries: int = 0) -> bool:
        if not self.enabled:
            return False
        self._last_sent = self._clock()
        if not self.background:
            return self.flush(retries)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="railyard-reporter", daemon=True)
            self._thread.start()
        self._due.set()
        return True

    def _run(self) -> None:
        """The sender: one report whenever one is due; an undelivered checkpoint again after a pause."""
        pause = RETRY_SECONDS
        while True:
            # With a save-on-fault callback, report at least every min_interval even when no step ends.
            idle = self.min_interval if self._fault_save is not None else None
            self._due.wait(pause if self._unsent else idle)
            self._due.clear()
            delivered = self.flush()
            settled = delivered or not self._unsent or self.stale
            pause = RETRY_SECONDS if settled else min(RETRY_MAX_SECONDS, pause * 2)
            if self._closing and (delivered or not self._unsent or self.stale):
                return

    @property
    def _unsent(self) -> bool:
        return self._unsent_checkpoint or self._unsent_fault

    def flush(self, retries: int = 0, backoff: float = 0.5) -> bool:
        """Send what is pending now, on this thread; `retries` more attempts (doubling waits) on 429,
        503 or a network error."""
        if not self.enabled:
            return False
        for attempt in range(retries + 1):
            body = self.payload()
            try:
                answer = self._send(body)
                break
            except ReportError as e:
                if e.status == 409:
                    self.stale = True
                    self.next_attempt = e.answer.get("attempt")
                if e.status not in (429, 503) or attempt == retries:
                    self._warn(str(e))
                    return False
            except (OSError, ValueError) as e:
                if attempt == retries:
                    self._warn(f"report not sent: {e}")
                    return False
            time.sleep(backoff * 2 ** attempt)
        with self._lock:
            sent = {s[0] for s in body["samples"]}
            kept = [s for s in self._samples if s[0] not in sent]  # added while this report was on its way
            self._samples.clear()
            self._samples.extend(kept)
            if self._checkpoints and body["checkpoints"] and body["checkpoints"][-1] == self._checkpoints[-1]:
                self._unsent_checkpoint = False
            if self._fault_saved is not None and body.get("faultSave") == self._fault_saved:
                self._unsent_fault = False
        self.directives = answer.get("directives") or {}
        self.sent += 1
        self._answer_fault_save()
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
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                answer = json.loads(text)
            except ValueError:
                answer = None
            raise ReportError(e.code, text, answer if isinstance(answer, dict) else None) from None
        return json.loads(raw) if raw else {}


def _opener(ca_file: str | None, ca_pem: str | None = None) -> urllib.request.OpenerDirector:
    """An opener that ignores http(s)_proxy (the bearer token must not travel through a proxy) and,
    for https, trusts only the CA it is given (a file, or PEM text) when one is given."""
    handlers: list[Any] = [urllib.request.ProxyHandler({})]
    if ca_file or ca_pem:
        context = ssl.create_default_context(cafile=ca_file or None, cadata=ca_pem or None)
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)
