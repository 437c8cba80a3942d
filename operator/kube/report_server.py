"""The endpoint railyard.worker posts to: POST /v1/reports (JSON, see decide/reports.WorkerReport).

Each request is authenticated with the pod's projected service-account token (audience
`railyard.dev`), checked by TokenReview: the token names the pod it is bound to, and the pod must be
the one running the reported rank of the job's current attempt. Answers:
200 {"accepted": true, "directives": {...}} | 400 malformed | 401 no or bad token | 403 not your rank |
409 stale attempt | 429 too many reports | 503 not the leader (the worker retries; the Service
spreads retries over the replicas).

Reports only update the in-memory ProgressBook; the actors write what they add up to
(status.lastCheckpoint) in batches, never one API write per report.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from pydantic import ValidationError
from railyard.operator.base import metrics
from railyard.operator.base.settings import ReportSettings
from railyard.operator.cache.progress import ProgressBook
from railyard.operator.cache.state import ClusterState
from railyard.operator.decide.reports import Refusal, WorkerReport, check_report
from railyard.topology.documents import format_validation

log = logging.getLogger("railyard.reports")

POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"


class TokenReviewer(Protocol):
    async def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]:
        """TokenReview status for the token (kube/client.KubeApi.review_token)."""
        ...


@dataclass(frozen=True)
class PodIdentity:
    namespace: str
    name: str
    uid: str


class _Bucket:
    """Token bucket per pod: `rate` per second sustained, bursts of `burst`."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, now

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class ReportServer:
    def __init__(self, state: ClusterState, book: ProgressBook, reviewer: TokenReviewer, settings: ReportSettings,
                 is_leader: Callable[[], bool], clock: Callable[[], float] = time.monotonic) -> None:
        self.state = state
        self.book = book
        self.reviewer = reviewer  # its own client, no fence: a TokenReview changes nothing
        self.settings = settings
        self.is_leader = is_leader
        self.clock = clock
        self._identities: dict[str, tuple[PodIdentity | None, float]] = {}  # token digest -> (who, until)
        self._buckets: dict[str, _Bucket] = {}
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if self.settings.port <= 0:
            return
        app = web.Application(client_max_size=256 * 1024)
        app.router.add_post("/v1/reports", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        context = None
        if self.settings.tls_cert:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.settings.tls_cert, self.settings.tls_key or None)
        try:
            await web.TCPSite(self._runner, "0.0.0.0", self.settings.port, ssl_context=context).start()
        except OSError as e:  # placement matters more than reports (as for the metrics port)
            log.error("report endpoint: port %d unavailable (%s); worker reports are refused", self.settings.port, e)
            return
        log.info("report endpoint on port %d (%s)", self.settings.port, "https" if context else "http")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        refusal, answer = await self._judge(request)
        if refusal is not None:
            metrics.REPORTS.labels(refusal.reason).inc()
            return web.json_response({"accepted": False, "reason": refusal.reason, "message": refusal.message},
                                     status=refusal.status)
        metrics.REPORTS.labels("accepted").inc()
        return web.json_response({"accepted": True, **answer})

    async def _judge(self, request: web.Request) -> tuple[Refusal | None, dict[str, Any]]:
        if not self.is_leader():
            return Refusal(503, "not_leader", "this replica is not the leader; retry"), {}
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not header[7:].strip():
            return Refusal(401, "unauthenticated", "missing bearer token"), {}
        try:
            identity = await self._authenticate(header[7:].strip())
        except Exception as e:  # the API server unreachable: the worker retries later
            log.warning("TokenReview failed: %s", e)
            return Refusal(503, "auth_unavailable", "token review failed; retry"), {}
        if identity is None:
            return Refusal(401, "unauthenticated", f"token not valid for audience {self.settings.audience!r} or "
                           "not bound to a pod"), {}
        try:
            report = WorkerReport.model_validate(await request.json())
        except ValidationError as e:
            return Refusal(400, "invalid", format_validation(e)), {}
        except ValueError as e:
            return Refusal(400, "invalid", f"body is not JSON: {e}"), {}
        refusal = check_report(report, identity.namespace, identity.name, identity.uid,
                               self.state.pods.get((identity.namespace, identity.name)),
                               self.state.jobs.get((report.namespace, report.job)))
        if refusal is not None:
            return refusal, {}
        now = self.clock()
        bucket = self._buckets.get(identity.uid)
        if bucket is None:
            if len(self._buckets) > 100_000:
                self._buckets.clear()
            bucket = self._buckets[identity.uid] = _Bucket(self.settings.rate_per_second, 10, now)
        if not bucket.take(now):
            return Refusal(429, "rate_limited", f"more than {self.settings.rate_per_second}/s from this pod"), {}
        self.book.record(report, time.time())
        return None, {"directives": self.book.directives((report.namespace, report.job))}

    async def _authenticate(self, token: str) -> PodIdentity | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        cached = self._identities.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        status = await self.reviewer.review_token(token, [self.settings.audience])
        identity = _identity(status)
        if len(self._identities) > 50_000:
            self._identities = {k: v for k, v in self._identities.items() if v[1] > now}
        # An accepted token is trusted until it expires (kubelet rotates it at 80 % of its life): every
        # report is still checked against the live pod, so a deleted pod's token gets nothing. 16k pods
        # then cost a TokenReview per pod per rotation, not per minute. A refusal is cached briefly too:
        # a misconfigured pod must not turn into a TokenReview flood.
        lifetime = min(token_lifetime(token, time.time()), self.settings.auth_cache_seconds) if identity else 10.0
        self._identities[digest] = (identity, now + lifetime)
        return identity


def token_lifetime(token: str, now: float) -> float:
    """Seconds until the JWT's `exp` (read, not verified: the TokenReview verified it); 0 if unreadable."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return max(0.0, float(claims["exp"]) - now)
    except (IndexError, KeyError, TypeError, ValueError):
        return 0.0


def _identity(status: dict[str, Any]) -> PodIdentity | None:
    if not status.get("authenticated"):
        return None
    user = status.get("user") or {}
    username = user.get("username") or ""
    extra = user.get("extra") or {}
    names, uids = extra.get(POD_NAME) or [], extra.get(POD_UID) or []
    if not username.startswith(SA_PREFIX) or not names or not uids:
        return None
    namespace = username[len(SA_PREFIX):].split(":", 1)[0]
    return PodIdentity(namespace, names[0], uids[0])
