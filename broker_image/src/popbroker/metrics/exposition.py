"""``GET /metrics`` in the Prometheus text format, served on the role's event loop.

    server = await serve_metrics("0.0.0.0:9100", registry, refreshers=[m.refresh])
    ...
    await server.stop()

A scrape awaits every refresher (they read live state of the role: the same
loop, so no locks and no torn reads), then renders ``registry``. A refresher
that fails is skipped: the other metrics are still served (its own keep their
last values), and the failure is counted in ``popfleet_metrics_refresh_errors_total``.
A failure that says it may pass (an error with ``retriable`` true: the store
frozen, restarting or stepping down) is an operating condition, not a bug: one
WARNING when such a streak starts and one INFO when the refresher answers again,
however many scrapes fall in between (Prometheus scrapes every few seconds).
Anything else is logged with its traceback at every scrape. Anything but
``GET /metrics`` (and ``GET /``) is answered 404; requests are bounded in size
and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

log = logging.getLogger(__name__)

Refresher = Callable[[], Awaitable[None]]
READ_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 16 * 1024


def split_host_port(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` → (host, port); a clear ``ValueError`` otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--metrics-listen {listen!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class MetricsServer:
    """A started ``/metrics`` endpoint."""

    def __init__(
        self, registry: CollectorRegistry, refreshers: Sequence[Refresher], errors: Counter
    ) -> None:
        self._registry = registry
        self._refreshers = list(refreshers)
        self._errors = errors
        self._unavailable: set[int] = set()  # refreshers (by index) in a retriable streak
        self._server: asyncio.Server | None = None
        self.port = 0

    async def render(self) -> bytes:
        """Run the refreshers, then the registry in the text format."""
        for index, refresh in enumerate(self._refreshers):
            try:
                await refresh()
            except Exception as exc:
                self._errors.inc()
                if not getattr(exc, "retriable", False):
                    log.exception("metrics refresher %r failed", refresh)
                elif index not in self._unavailable:
                    self._unavailable.add(index)
                    log.warning(
                        "metrics refresher %r: its source is unavailable for now (%s: %s); "
                        "its series keep their last values until it answers",
                        refresh, type(exc).__name__, exc,
                    )  # fmt: skip
                continue
            if index in self._unavailable:
                self._unavailable.discard(index)
                log.info("metrics refresher %r answers again", refresh)
        return generate_latest(self._registry)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if (
                len(request_line) == 3
                and request_line[0] == "GET"
                and request_line[1]
                in (
                    "/metrics",
                    "/",
                )
            ):
                await _respond(
                    writer, b"200 OK", content_type=CONTENT_TYPE_LATEST, body=await self.render()
                )
            else:
                await _respond(
                    writer, b"404 Not Found", content_type="text/plain", body=b"not found\n"
                )
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def start(self, listen: str) -> None:
        host, port = split_host_port(listen)
        self._server = await asyncio.start_server(
            self._handle, host, port, limit=MAX_HEADER_BYTES, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("metrics: serving /metrics on %s (port %d)", host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None


async def _respond(
    writer: asyncio.StreamWriter, status: bytes, *, content_type: str, body: bytes
) -> None:
    writer.write(
        b"HTTP/1.1 " + status + b"\r\n"
        b"Content-Type: " + content_type.encode() + b"\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n"
        b"Connection: close\r\n\r\n" + body
    )
    await writer.drain()


async def serve_metrics(
    listen: str, registry: CollectorRegistry, *, refreshers: Sequence[Refresher] = ()
) -> MetricsServer:
    """Serve ``registry`` on ``listen`` (``HOST:PORT``; port 0 picks one: ``server.port``)."""
    errors = Counter(
        "popfleet_metrics_refresh_errors",
        "Scrapes on which a role's metrics reader failed (its gauges are stale)",
        registry=registry,
    )
    server = MetricsServer(registry, refreshers, errors)
    await server.start(listen)
    return server
