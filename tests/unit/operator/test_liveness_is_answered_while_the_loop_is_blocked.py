"""``/healthz`` is answered from its own thread: promptly while the event loop is busy or
blocked, 200 until the loop has been stuck for ``stall_s``, 503 after, 200 again once the
loop runs."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from popfleet_operator.handlers import liveness


class Clock:
    def __init__(self) -> None:
        self.now_s = 500.0

    def __call__(self) -> float:
        return self.now_s


@dataclass
class Loop:
    """An event loop in a thread, beating ``heartbeat`` (the operator's, in miniature)."""

    loop: asyncio.AbstractEventLoop

    def block(self) -> threading.Event:
        """Block the loop (a callback that never yields) until the returned event is set."""
        blocked, release = threading.Event(), threading.Event()

        def stuck() -> None:
            blocked.set()
            release.wait(30)

        self.loop.call_soon_threadsafe(stuck)
        assert blocked.wait(5)
        return release


def get(port: int, path: str = liveness.PATH) -> tuple[int, dict[str, Any], float]:
    """(status, JSON body, seconds it took)."""
    start = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read()), time.monotonic() - start
    finally:
        connection.close()


def wait_until(condition: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        threading.Event().wait(0.005)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def heartbeat(clock: Clock) -> liveness.Heartbeat:
    return liveness.Heartbeat(stall_s=20.0, clock=clock)


@pytest.fixture
def server(heartbeat: liveness.Heartbeat) -> Iterator[liveness.Server]:
    found = liveness.Server("127.0.0.1", 0, heartbeat=heartbeat)
    found.start()
    yield found
    found.stop()


@pytest.fixture
def loop(heartbeat: liveness.Heartbeat) -> Iterator[Loop]:
    event_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=event_loop.run_forever, daemon=True)
    thread.start()
    beating = asyncio.run_coroutine_threadsafe(
        liveness.keep_beating(heartbeat, interval_s=0.01), event_loop
    )
    yield Loop(event_loop)
    beating.cancel()
    event_loop.call_soon_threadsafe(event_loop.stop)
    thread.join(5)
    event_loop.close()


@pytest.mark.timeout(30)
def test_a_blocked_loop_is_answered_at_once_and_failed_only_past_the_threshold(
    clock: Clock, heartbeat: liveness.Heartbeat, server: liveness.Server, loop: Loop
) -> None:
    clock.now_s += 1.0
    wait_until(lambda: heartbeat.age_s() == 0.0)  # the loop beat since: it runs
    release = loop.block()
    clock.now_s += 19.0  # stuck, but not yet for stall_s
    status, body, took_s = get(server.port)
    assert (status, body["loop"]) == (200, "alive")
    assert took_s < 1.0
    clock.now_s += 2.0  # 21 s without a beat
    status, body, took_s = get(server.port)
    assert (status, body) == (503, {"loop": "stuck", "heartbeatAgeSeconds": 21.0})
    assert took_s < 1.0  # and the age says the loop really was blocked all along
    release.set()
    wait_until(lambda: heartbeat.age_s() == 0.0)
    status, body, _ = get(server.port)
    assert (status, body) == (200, {"loop": "alive", "heartbeatAgeSeconds": 0.0})


def test_other_paths_are_not_found(server: liveness.Server) -> None:
    status, _, _ = get(server.port, "/metrics")
    assert status == 404


def test_the_heartbeat_counts_from_its_start(clock: Clock) -> None:
    heartbeat = liveness.Heartbeat(stall_s=20.0, clock=clock)
    assert heartbeat.alive()
    clock.now_s += 20.5
    assert not heartbeat.alive()
    heartbeat.beat()
    assert heartbeat.alive()
    assert heartbeat.age_s() == 0.0


@pytest.mark.parametrize(
    ("value", "address"), [("10.1.2.3:8080", ("10.1.2.3", 8080)), (":8080", ("0.0.0.0", 8080))]
)
def test_listen_addresses(value: str, address: tuple[str, int]) -> None:
    assert liveness.parse_listen(value) == address
