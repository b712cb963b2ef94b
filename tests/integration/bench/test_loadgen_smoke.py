"""The compiled load generator drives a real ``popbroker all`` through every phase.

The Go module in ``bench/loadgen`` is built (or found in ``~/.cache/popfleet``;
``make test`` builds it up front) and run phase by phase against one broker on a
free 127.0.0.1 port, with small counts: the v2 protocol as the official clients
speak it (route, Telemetry settings, batched sends, receive streams, batched
acks, ChangeInvisibleDuration) gets real answers, each phase's JSON line is what
the harness parses, and the broker's CPU is read around a phase. A missing Go
toolchain or a failed build fails this test; it never skips. Timings are not
asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.peers import cpu, loadgen, procs, servers

# A cold build compiles gRPC, nats.go and go-redis: minutes on 2 cores.
pytestmark = pytest.mark.timeout(900)

TOPICS = ("bench", "e2e", "lat", "redeliver")
GROUPS = ("g2", "ge2e", "glat", "gre")


@pytest.fixture(scope="module")
def binary() -> Path:
    return loadgen.ensure_built()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[procs.ServerSet]:
    reason = servers.popfleet_available()
    assert reason is None, reason
    server = servers.start_popfleet(
        tmp_path, topics=[servers.PopfleetTopic(t) for t in TOPICS], groups=GROUPS
    )
    yield procs.ServerSet.of(server)
    server.stop()
    assert server.alive_pids() == []


def test_every_phase_runs_against_popbroker_all(binary: Path, broker: procs.ServerSet) -> None:
    def run(**fields: Any) -> dict[str, Any]:
        phase = loadgen.Phase(
            system="popfleet", endpoint=broker.endpoint, await_s=1, cap_s=30, **fields
        )
        return loadgen.run_phase(binary, phase)

    assert run(phase="ready", topics=TOPICS)["topics"] == list(TOPICS)

    before = cpu.read(broker.root_pids())
    produced = run(phase="produce", topic="bench", count=200)
    window = cpu.window(before, cpu.read(broker.root_pids()), int(produced["messages"]))
    assert produced["messages"] == 200
    assert produced["capped"] is False
    assert window["server_processes"] == 1

    consumed = run(phase="popack", topic="bench", group="g2", count=200, consumers=2)
    assert consumed["messages"] == 200
    assert consumed["capped"] is False
    assert consumed["consumers"] == 2

    e2e = run(phase="e2e", topic="e2e", group="ge2e", count=100)
    assert (e2e["messages"], e2e["capped"]) == (100, False)

    latency = run(phase="latency", topic="lat", group="glat", rate=50, duration_s=1)
    assert latency["sent"] == latency["received"] == 50
    assert latency["samples"] == 25  # the first 0.5 s are warm-up

    redelivered = run(
        phase="redelivery", topic="redeliver", group="gre", count=8,
        invisible_s=10, change_invisible_s=1,
    )  # fmt: skip
    assert redelivered["via"] == "change_invisible_duration"
    assert redelivered["returned"] == 8
    assert redelivered["early"] == 0


def test_loopback_is_the_only_target(binary: Path) -> None:
    phase = loadgen.Phase(system="popfleet", endpoint="192.0.2.1:8081", phase="ready")
    with pytest.raises(RuntimeError, match="loopback"):
        loadgen.run_phase(binary, phase)
