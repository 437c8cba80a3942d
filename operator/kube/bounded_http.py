"""A small HTTP/1.1 server with every limit enforced before a handler runs (the report endpoint's
transport): headers within `header_seconds`, a body of at most `max_body` bytes within
`body_seconds`, idle keep-alive connections closed after `idle_seconds`, at most `max_connections`
at once, TLS when a context is given. It runs on a thread and event loop of its own, so a flood of
requests never delays the operator's placement loop or its Lease renewal.

Why not aiohttp: it has no deadline for headers or body, and it would share the operator's
event loop; this one is ~170 lines and owns its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("railyard.http")

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large", 429: "Too Many Requests",
            503: "Service Unavailable"}


@dataclass
class Request:
    method: str
    path: str
    source: str  # the peer's address
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased
    body: bytes = b""
    client_certified: bool = False  # the peer presented a certificate the server's client CA verified

    @property
    def keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


Handler = Callable[[Request], Awaitable[tuple[int, dict[str, Any]]]]


@dataclass(frozen=True)
class Limits:
    max_head: int = 8 * 1024
    max_body: int = 64 * 1024
    header_seconds: float = 5.0
    body_seconds: float = 10.0
    idle_seconds: float = 60.0
    max_connections: int = 4096
    # After a body refused unread: how long and how much of it to discard before closing. Closing with
    # unread bytes makes the kernel answer with a reset, and a reset destroys the 413 before the peer reads it.
    linger_seconds: float = 1.0
    linger_bytes: int = 1024 * 1024


class _TooLarge(Exception):
    pass


ON_STOP_SECONDS = 2.0


class BoundedHttpServer:
    """Serves `handler` on `port` from its own thread; `start()` returns once it listens (or failed)."""

    def __init__(self, handler: Handler, port: int, tls: ssl.SSLContext | None = None,
                 limits: Limits | None = None, name: str = "railyard-http",
                 every: tuple[float, Callable[[], None]] | None = None,
                 on_stop: Callable[[], Awaitable[None]] | None = None) -> None:
        self.handler, self.port, self.tls, self.limits, self.name = handler, port, tls, limits or Limits(), name
        self.every = every  # (seconds, fn): run on the server's own loop, e.g. reload a renewed certificate
        self.on_stop = on_stop  # run on the server's own loop before it closes, e.g. close a handler's client
        self.listening = False
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    def start(self, timeout: float = 10.0) -> bool:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        self._started.wait(timeout)
        return self.listening

    def stop(self, timeout: float = 5.0) -> None:
        loop = self._loop
        if self.listening and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        server = None
        try:
            try:
                server = loop.run_until_complete(asyncio.start_server(
                    self._serve, "0.0.0.0", self.port, ssl=self.tls, limit=self.limits.max_head,
                    ssl_handshake_timeout=self.limits.header_seconds if self.tls else None))
                self.port = server.sockets[0].getsockname()[1]
                self.listening = True
            except OSError as e:
                log.error("%s: port %d unavailable (%s)", self.name, self.port, e)
            finally:
                self._started.set()
            if server is not None:
                repeating = loop.create_task(self._repeat(*self.every)) if self.every is not None else None
                loop.run_forever()
                if repeating is not None:
                    repeating.cancel()
                server.close()
                for task in asyncio.all_tasks(loop):
                    task.cancel()
                loop.run_until_complete(asyncio.sleep(0))
                if self.on_stop is not None:
                    try:
                        # bounded: a client close that hangs must not hold up the Lease hand-over after it
                        loop.run_until_complete(asyncio.wait_for(self.on_stop(), ON_STOP_SECONDS))
                    except Exception as e:  # stopping goes on
                        log.warning("%s: on stop: %s", self.name, e)
        finally:
            self.listening = False
            loop.close()

    async def _repeat(self, seconds: float, fn: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                fn()
            except Exception as e:  # the server goes on with what it has
                log.warning("%s: periodic task failed: %s", self.name, e)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        # With a client CA (CERT_OPTIONAL), a presented certificate is verified in the handshake or the
        # connection fails: one that is here was verified.
        certified = bool(writer.get_extra_info("peercert"))
        self.connections += 1
        try:
            if self.connections > self.limits.max_connections:
                await self._respond(writer, 503, {"accepted": False, "reason": "busy"}, keep_alive=False)
                return
            wait = self.limits.header_seconds
            while True:
                try:
                    request = await self._read(reader, source, wait, certified)
                except _TooLarge:
                    await self._respond(writer, 413, {"accepted": False, "reason": "too_large",
                                                      "message": f"at most {self.limits.max_body} bytes"}, False)
                    await self._discard(reader, writer)
                    return
                except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                        ConnectionError, ssl.SSLError):
                    return  # slow, truncated or malformed: the connection ends and nothing was done for it
                if request is None:
                    return
                status, answer = await self.handler(request)
                await self._respond(writer, status, answer, request.keep_alive)
                if not request.keep_alive:
                    return
                wait = self.limits.idle_seconds
        finally:
            self.connections -= 1
            writer.close()

    async def _discard(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Half-close where the transport can (TLS cannot), then drop what the peer still sends, within
        the linger bounds, so the connection ends with a FIN the peer reads after the answer."""
        if writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()
        left = self.limits.linger_bytes
        with contextlib.suppress(TimeoutError, ConnectionError, ssl.SSLError):
            async with asyncio.timeout(self.limits.linger_seconds):
                while left > 0 and (chunk := await reader.read(min(left, 64 * 1024))):
                    left -= len(chunk)

    async def _read(self, reader: asyncio.StreamReader, source: str, wait: float,
                    certified: bool = False) -> Request | None:
        """One request; None when the peer closed the connection between requests."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait)
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                return None
            raise
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise ValueError("chunked bodies are not accepted")
        length = int(headers.get("content-length") or 0)
        if length < 0 or length > self.limits.max_body:
            raise _TooLarge()
        body = await asyncio.wait_for(reader.readexactly(length), self.limits.body_seconds) if length else b""
        return Request(method, target.split("?", 1)[0], source, headers, body, certified)

    async def _respond(self, writer: asyncio.StreamWriter, status: int, answer: dict[str, Any],
                       keep_alive: bool) -> None:
        data = json.dumps(answer).encode()
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
        writer.write(head.encode() + data)
        with contextlib.suppress(TimeoutError, ConnectionError):  # a peer that stopped reading
            await asyncio.wait_for(writer.drain(), self.limits.body_seconds)
