"""The compiled load generator (Go, ``bench/loadgen/``): build it once, run one phase.

Build: :mod:`tools.gobuild` (into ``~/.cache/popfleet/loadgen-<digest>/``, never
committed); a build failure raises :class:`LoadgenUnavailable` with the tail of go's
output: the benchmark and its smoke test fail loudly, never skip.

Run: :func:`run_phase` starts the binary for one phase (``-system``, ``-phase``,
... as :class:`Phase` lists them), optionally inside another process's network
namespace (``nsenter --net``; RocketMQ runs in a private one), bounded in time,
and returns the figures of the JSON line the binary prints (:func:`parse_result`).

Callers: :mod:`bench.pop_peers_loadgen`, ``tests/integration/bench``.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import gobuild

LoadgenUnavailable = gobuild.GoBuildFailed


def ensure_built(*, cache: Path = gobuild.CACHE) -> Path:
    """The load generator for the current sources (:func:`tools.gobuild.ensure_built`)."""
    return gobuild.ensure_built(gobuild.LOADGEN, cache=cache)


@dataclass(frozen=True, slots=True)
class Phase:
    """One invocation of the load generator (flags as in ``bench/loadgen/main.go``)."""

    system: str  # popfleet | rocketmq | nats | redis
    endpoint: str
    phase: str  # ready | produce | popack | e2e | latency | redelivery
    topic: str = "bench"
    group: str = "g1"
    count: int = 20_000
    consumers: int = 1
    rate: float = 1000.0
    duration_s: float = 5.0
    invisible_s: float = 60.0
    change_invisible_s: float = 0.0
    await_s: float = 5.0
    cap_s: float = 60.0
    redis_poll_s: float = 0.05
    topics: tuple[str, ...] = field(default_factory=tuple)

    def argv(self) -> list[str]:
        args = [
            "-system", self.system,
            "-endpoint", self.endpoint,
            "-phase", self.phase,
            "-topic", self.topic,
            "-group", self.group,
            "-count", str(self.count),
            "-consumers", str(self.consumers),
            "-rate", f"{self.rate:g}",
            "-duration-s", f"{self.duration_s:g}",
            "-invisible-s", f"{self.invisible_s:g}",
            "-change-invisible-s", f"{self.change_invisible_s:g}",
            "-await-s", f"{self.await_s:g}",
            "-cap-s", f"{self.cap_s:g}",
            "-redis-poll-s", f"{self.redis_poll_s:g}",
        ]  # fmt: skip
        if self.topics:
            args += ["-topics", ",".join(self.topics)]
        return args

    @property
    def timeout_s(self) -> float:
        """The binary stops itself well before this; past it we kill it."""
        return self.cap_s + 3 * self.duration_s + self.invisible_s + 120


def parse_result(stdout: str, *, phase: str) -> dict[str, Any]:
    """The figures of the one JSON line for ``phase`` in the binary's stdout."""
    found: list[dict[str, Any]] = []
    for raw in stdout.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        value = json.loads(line)
        if isinstance(value, dict) and value.get("phase") == phase:
            found.append(value)
    if len(found) != 1:
        raise ValueError(f"expected one result line for phase {phase!r}, got {len(found)}")
    return found[0]


def netns_prefix(netns_pid: int | None) -> list[str]:
    """``nsenter`` into the network namespace of ``netns_pid`` (nothing for None)."""
    if netns_pid is None:
        return []
    return ["nsenter", f"--net=/proc/{netns_pid}/ns/net", "--"]


def run_phase(binary: Path, phase: Phase, *, netns_pid: int | None = None) -> dict[str, Any]:
    """Run one phase to its end and return its figures; raise with stderr on failure."""
    argv = [*netns_prefix(netns_pid), str(binary), *phase.argv()]
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=phase.timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"loadgen {phase.system} {phase.phase} exceeded its timeout") from exc
    if out.returncode != 0:
        raise RuntimeError(
            f"loadgen {phase.system} {phase.phase} failed ({out.returncode}): {out.stderr[-2000:]}"
        )
    return parse_result(out.stdout, phase=phase.phase)
