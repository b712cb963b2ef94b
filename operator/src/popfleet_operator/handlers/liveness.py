"""The liveness endpoint, answered off the event loop from a heartbeat the loop refreshes.

kopf's own ``/healthz`` runs on the operator's event loop; with a thousand objects in flight
it answered late (p90 2 s, max 4 s against the probe's 1 s timeout) and the kubelet killed a
working operator, which then reprocessed every object from scratch. Here:

1. :func:`keep_beating`, a task on the event loop, calls :meth:`Heartbeat.beat` every
   ``interval_s`` (1 s): the loop is alive as long as it gets to run that task;
2. :class:`Server`, an HTTP server in its own daemon thread, answers ``GET /healthz``
   from the heartbeat alone: 200 while the last beat is at most ``stall_s`` old, 503
   (with the age) once the loop has been stuck longer. A busy loop delays beats by
   milliseconds to a second, far below ``stall_s``; only a stuck loop fails the probe.

``stall_s`` (``$POPFLEET_LOOP_STALL_S``, default 20) stays well inside the chart's failure
budget (period 20 s x 3 failures), so a stuck loop restarts the pod within about a minute
and a slow one never does. Started and stopped by ``handlers.settings`` when
``$POPFLEET_HEALTH_LISTEN`` is set; the clock is injectable for tests.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STALL_S = 20.0
PATH = "/healthz"


@dataclass
class Heartbeat:
    """When the event loop last ran :func:`keep_beating` (read from any thread)."""

    stall_s: float = STALL_S
    clock: Callable[[], float] = time.monotonic
    _last_s: float = field(init=False)

    def __post_init__(self) -> None:
        self._last_s = self.clock()

    def beat(self) -> None:
        self._last_s = self.clock()

    def age_s(self) -> float:
        return max(0.0, self.clock() - self._last_s)

    def alive(self) -> bool:
        return self.age_s() <= self.stall_s


async def keep_beating(heartbeat: Heartbeat, *, interval_s: float = 1.0) -> None:
    """Beat every ``interval_s`` until cancelled (step 1 of the module docstring)."""
    while True:
        heartbeat.beat()
        await asyncio.sleep(interval_s)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _HealthServer

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != PATH:
            self._answer(404, {"error": "not found"})
            return
        heartbeat = self.server.heartbeat
        age_s = round(heartbeat.age_s(), 3)
        if heartbeat.alive():
            self._answer(200, {"loop": "alive", "heartbeatAgeSeconds": age_s})
        else:
            self._answer(503, {"loop": "stuck", "heartbeatAgeSeconds": age_s})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Probes every 20 s are not worth a log line."""


class _HealthServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], heartbeat: Heartbeat) -> None:
        super().__init__(address, _Handler)
        self.heartbeat = heartbeat


class Server:
    """``GET /healthz`` on ``host:port`` (port 0: any free one) from a thread of its own."""

    def __init__(self, host: str, port: int, *, heartbeat: Heartbeat) -> None:
        self._http = _HealthServer((host, port), heartbeat)
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="liveness", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (an empty host: every address) as a bind address."""
    host, _, port = value.rpartition(":")
    return host or "0.0.0.0", int(port)  # noqa: S104 - the pod's own address in a real pod
