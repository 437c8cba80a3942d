"""The endpoint railyard.worker posts to: POST /v1/reports (JSON, see decide/reports.WorkerReport).

Served by kube/bounded_http (its own thread and event loop, TLS when a certificate is given; header,
body and connection limits). Every other limit holds before any work is done for a request:
- per source address, a token bucket first (RAILYARD_REPORT_SOURCE_RATE a second, bursts of 50);
- TokenReviews run at most REVIEWS_IN_FLIGHT at a time with at most REVIEWS_WAITING queued, and at
  most RAILYARD_REPORT_REVIEWS_PER_SECOND a second; beyond that the answer is 429 at once, so a flood
  of bogus tokens from many addresses costs the API server a bounded rate;
- a token is accepted only when the review says it is valid for the endpoint's audience
  (status.audiences) and bound to a pod, and that pod runs the reported rank of the job's current
  attempt (decide/reports.check_report); then a bucket per pod (RAILYARD_REPORT_RATE).
Answers: 200 {"accepted": true, "directives": {...}} | 400 malformed | 401 no or bad token | 403 not
your rank | 404 no such path | 405 not POST | 409 stale attempt | 413 too large | 429 too many | 503
not the leader (the reports Service selects the leader only; 503 covers the hand-over).

Reports only update the in-memory ProgressBook (under its lock); the actors write what they add up
to in batches, never one API write per report.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError
from railyard.operator.base import metrics
from railyard.operator.base.settings import ReportSettings
from railyard.operator.cache.evictions import EvictionBook
from railyard.operator.cache.progress_book import ProgressBook
from railyard.operator.cache.state import ClusterState
from railyard.operator.decide import eviction_review, gang_admission
from railyard.operator.decide.checkpoint_wait import nobody_reports
from railyard.operator.decide.reports import Refusal, WorkerReport, check_report
from railyard.operator.kube.bounded_http import BoundedHttpServer, Request
from railyard.topology.planner.documents import format_validation

log = logging.getLogger("railyard.reports")

POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"
PATH = "/v1/reports"
REVIEWS_IN_FLIGHT, REVIEWS_WAITING = 8, 64
SOURCE_BURST, POD_BURST = 50.0, 10.0
CERT_CHECK_SECONDS = 30.0


class TokenReviewer(Protocol):
    async def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]:
        """TokenReview status for the token (kube/client.KubeApi.review_token)."""
        ...

    async def aclose(self) -> None:
        """Close the calling loop's connections (the server's own, when it stops)."""
        ...


@dataclass(frozen=True)
class PodIdentity:
    namespace: str
    name: str
    uid: str


class _Bucket:
    """Token bucket: `rate` per second sustained, bursts of `burst`."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, now

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class _Buckets:
    """One bucket per key, bounded: when full, the idlest half is forgotten."""

    def __init__(self, rate: float, burst: float, most: int) -> None:
        self.rate, self.burst, self.most = rate, burst, most
        self._by_key: dict[str, _Bucket] = {}

    def take(self, key: str, now: float) -> bool:
        bucket = self._by_key.get(key)
        if bucket is None:
            if len(self._by_key) >= self.most:
                for old in sorted(self._by_key, key=lambda k: self._by_key[k].at)[:self.most // 2]:
                    del self._by_key[old]
            bucket = self._by_key[key] = _Bucket(self.rate, self.burst, now)
        return bucket.take(now)


class ReportServer:
    def __init__(self, state: ClusterState, book: ProgressBook, reviewer: TokenReviewer, settings: ReportSettings,
                 is_leader: Callable[[], bool], clock: Callable[[], float] = time.monotonic,
                 evictions: EvictionBook | None = None, hold_seconds: float = 300.0) -> None:
        self.state = state
        self.hold_seconds = hold_seconds  # how long an eviction of a draining gang's rank is held at most
        self.book = book
        self.evictions = evictions if evictions is not None else EvictionBook()
        self.reviewer = reviewer  # its own client, no fence: a TokenReview changes nothing
        self.settings = settings
        self.is_leader = is_leader
        self.clock = clock
        self._identities: dict[str, tuple[PodIdentity | None, float]] = {}  # token digest -> (who, until)
        self._pods = _Buckets(settings.rate_per_second, POD_BURST, 100_000)
        self._sources = _Buckets(settings.source_rate_per_second, SOURCE_BURST, 100_000)
        self._review_budget = _Bucket(settings.reviews_per_second, settings.reviews_per_second, clock())
        self._reviews: asyncio.Semaphore | None = None  # made on the server's own loop
        self._waiting = 0
        self.http: BoundedHttpServer | None = None
        self._cert_stamp: tuple[float, float] = (0.0, 0.0)
        self._led_from: float | None = None  # first request seen while leading (None: not leading)

    def start(self, ephemeral: bool = False) -> bool:
        """Listen on the configured port from a thread of its own; False when off or the port is taken
        (logged: placement matters more than reports). `ephemeral`: on a port the OS picks (tests)."""
        if self.settings.port <= 0 and not ephemeral:
            return False
        context = None
        if self.settings.tls_cert:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.settings.tls_cert, self.settings.tls_key or None)
            self._cert_stamp = self._stamp()
            if self.settings.webhook_client_ca:  # reports come with tokens; the API server with its certificate
                context.verify_mode = ssl.CERT_OPTIONAL
                context.load_verify_locations(self.settings.webhook_client_ca)
        self.http = BoundedHttpServer(self.answer, 0 if ephemeral else self.settings.port, context,
                                      name="railyard-reports",
                                      every=(CERT_CHECK_SECONDS, lambda: self._reload(context)) if context else None,
                                      on_stop=self.reviewer.aclose)  # its sessions belong to the server's loop
        if not self.http.start():
            log.error("report endpoint unavailable; worker reports are refused")
            return False
        log.info("report endpoint on port %d (%s)", self.http.port, "https" if context else "http")
        return True

    def stop(self) -> None:
        if self.http is not None:
            self.http.stop()

    def _stamp(self) -> tuple[float, float]:
        return (os.stat(self.settings.tls_cert).st_mtime, os.stat(self.settings.tls_key).st_mtime
                if self.settings.tls_key else 0.0)

    def _reload(self, context: ssl.SSLContext | None) -> None:
        """A renewed certificate (cert-manager, a Secret update) is served to new connections without
        a restart: the mounted files change, the same context loads them."""
        if context is None:
            return
        stamp = self._stamp()
        if stamp != self._cert_stamp:
            context.load_cert_chain(self.settings.tls_cert, self.settings.tls_key or None)
            self._cert_stamp = stamp
            log.info("report endpoint: certificate reloaded from %s", self.settings.tls_cert)

    async def answer(self, request: Request) -> tuple[int, dict[str, Any]]:
        if request.path == eviction_review.PATH:
            return self._eviction(request)
        if request.path == gang_admission.PATH:
            return self._gang_pod(request)
        refusal, answer = await self._judge(request)
        if refusal is not None:
            metrics.REPORTS.labels(refusal.reason).inc()
            answer = {"accepted": False, "reason": refusal.reason, "message": refusal.message}
            if refusal.attempt is not None:
                answer["attempt"] = refusal.attempt
            return refusal.status, answer
        metrics.REPORTS.labels("accepted").inc()
        return 200, {"accepted": True, **answer}

    def _leading_since(self, now: float) -> float:
        """Since when this replica has led, as far as its requests saw (reports come to the leader only)."""
        if self._led_from is None:
            self._led_from = now
        return self._led_from

    def _gang_pod(self, request: Request) -> tuple[int, dict[str, Any]]:
        """The API server asks before creating an opted-in pod (the chart's MutatingWebhookConfiguration): it
        gets Railyard's scheduling gate (decide/gang_admission). Any replica answers (nothing is decided)."""
        if request.method != "POST":
            return 405, {"message": "POST an AdmissionReview"}
        if self.settings.webhook_client_ca and not request.client_certified:
            return 403, {"message": "the pod webhook answers the API server only: present a client certificate "
                                    "signed by RAILYARD_WEBHOOK_CLIENT_CA"}
        try:
            creation = gang_admission.parse_review(json.loads(request.body or b"null"))
        except ValueError as e:
            return 400, {"message": str(e)}
        return 200, gang_admission.answer(creation.uid, gang_admission.gate_patch(creation.pod))

    def _eviction(self, request: Request) -> tuple[int, dict[str, Any]]:
        """The API server asks before evicting a pod (the chart's ValidatingWebhookConfiguration): an eviction
        of a running gang's rank on a node being drained is noted — the placement loop moves the gang after a
        checkpoint — and held (429) meanwhile, boundedly (decide/eviction_review.judge); every other is
        allowed. With RAILYARD_WEBHOOK_CLIENT_CA only the API server (its client certificate) is answered."""
        if request.method != "POST":
            return 405, {"message": "POST an AdmissionReview"}
        if self.settings.webhook_client_ca and not request.client_certified:
            return 403, {"message": "the eviction webhook answers the API server only: present a client "
                                    "certificate signed by RAILYARD_WEBHOOK_CLIENT_CA"}
        if not self._sources.take(request.source, self.clock()):
            return 429, {"message": "too many requests"}
        try:
            ask = eviction_review.parse_review(json.loads(request.body or b"null"))
        except ValueError as e:
            return 400, {"message": str(e)}
        pod = self.state.pods.get((ask.namespace, ask.pod))
        if not self.is_leader():
            self._led_from = None
        if pod is None or pod.job is None or ask.dry_run or not self.is_leader():
            return 200, eviction_review.answer(ask.uid, eviction_review.Verdict(False))
        now, key = self.clock(), (ask.namespace, ask.pod)
        if self.evictions.note(key, now):
            log.info("eviction of %s/%s (job %s, node %s) asked for", ask.namespace, ask.pod, pod.job, pod.node_name)
            metrics.EVICTIONS_SEEN.inc()
        job = self.state.jobs.get((ask.namespace, pod.job))
        with self.book.lock:
            progress = self.book.jobs.get((ask.namespace, pod.job))
            heard = progress is not None and job is not None and progress.restart_count == job.restart_count
        # A new leader's empty book is not silence (decide/checkpoint_wait.nobody_reports).
        reports = heard or not nobody_reports(bool(self.settings.url), now - self._leading_since(now),
                                              self.settings.worker_interval_seconds)
        verdict = eviction_review.judge(pod, job, self.state.health.get(pod.node_name or ""), reports,
                                        now - (self.evictions.first_asked(key) or now), self.hold_seconds)
        return 200, eviction_review.answer(ask.uid, verdict)

    async def _judge(self, request: Request) -> tuple[Refusal | None, dict[str, Any]]:
        if request.path != PATH:
            return Refusal(404, "not_found", f"no such path {request.path!r}; reports go to {PATH}"), {}
        if request.method != "POST":
            return Refusal(405, "method", "POST a report"), {}
        if not self.is_leader():
            self._led_from = None
            return Refusal(503, "not_leader", "this replica is not the leader; retry"), {}
        now = self.clock()
        self._leading_since(now)
        if not self._sources.take(request.source, now):  # before any work for the request
            return Refusal(429, "rate_limited", f"more than {self.settings.source_rate_per_second:g}/s from "
                           f"{request.source}"), {}
        header = request.headers.get("authorization", "")
        if not header.startswith("Bearer ") or not header[7:].strip():
            return Refusal(401, "unauthenticated", "missing bearer token"), {}
        try:
            identity = await self._authenticate(header[7:].strip())
        except _Busy:
            return Refusal(429, "reviews_busy", "too many token reviews waiting; retry"), {}
        except Exception as e:  # the API server unreachable: the worker retries later
            log.warning("TokenReview failed: %s", e)
            return Refusal(503, "auth_unavailable", "token review failed; retry"), {}
        if identity is None:
            return Refusal(401, "unauthenticated", f"token not valid for audience {self.settings.audience!r} or "
                           "not bound to a pod"), {}
        try:
            report = WorkerReport.model_validate(json.loads(request.body or b"null"))
        except ValidationError as e:
            return Refusal(400, "invalid", format_validation(e)), {}
        except ValueError as e:
            return Refusal(400, "invalid", f"body is not JSON: {e}"), {}
        job = self.state.jobs.get((report.namespace, report.job))
        refusal = check_report(report, identity.namespace, identity.name, identity.uid,
                               self.state.pods.get((identity.namespace, identity.name)), job)
        if refusal is not None:
            return refusal, {}
        if not self._pods.take(identity.uid, now):
            return Refusal(429, "rate_limited", f"more than {self.settings.rate_per_second:g}/s from this pod"), {}
        assert job is not None  # check_report refuses reports for a job that does not exist
        self.book.record(report, time.time(), samples=job.straggler_policy is not None)
        return None, {"directives": self.book.directives((report.namespace, report.job))}

    async def _authenticate(self, token: str) -> PodIdentity | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        cached = self._identities.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        if self._waiting >= REVIEWS_WAITING or not self._review_budget.take(now):
            raise _Busy()
        if self._reviews is None:
            self._reviews = asyncio.Semaphore(REVIEWS_IN_FLIGHT)
        self._waiting += 1
        try:
            async with self._reviews:
                status = await self.reviewer.review_token(token, [self.settings.audience])
        finally:
            self._waiting -= 1
        identity = _identity(status, self.settings.audience)
        if len(self._identities) > 50_000:
            self._identities = {k: v for k, v in self._identities.items() if v[1] > now}
        # An accepted token is trusted until it expires (kubelet rotates it at 80 % of its life): every
        # report is still checked against the live pod, so a deleted pod's token gets nothing. 16k pods
        # then cost a TokenReview per pod per rotation, not per minute. A refusal is cached briefly too:
        # a misconfigured pod must not turn into a TokenReview flood.
        lifetime = min(token_lifetime(token, time.time()), self.settings.auth_cache_seconds) if identity else 10.0
        self._identities[digest] = (identity, now + lifetime)
        return identity


class _Busy(Exception):
    """The TokenReview queue is full."""


def token_lifetime(token: str, now: float) -> float:
    """Seconds until the JWT's `exp` (read, not verified: the TokenReview verified it); 0 if unreadable."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return max(0.0, float(claims["exp"]) - now)
    except (IndexError, KeyError, TypeError, ValueError):
        return 0.0


def _identity(status: dict[str, Any], audience: str) -> PodIdentity | None:
    """Who the TokenReview says the token is: a pod-bound service-account token valid for our audience."""
    if not status.get("authenticated") or audience not in (status.get("audiences") or []):
        return None
    user = status.get("user") or {}
    username = user.get("username") or ""
    extra = user.get("extra") or {}
    names, uids = extra.get(POD_NAME) or [], extra.get(POD_UID) or []
    if not username.startswith(SA_PREFIX) or not names or not uids:
        return None
    namespace = username[len(SA_PREFIX):].split(":", 1)[0]
    return PodIdentity(namespace, names[0], uids[0])
