"""The compiled load generator (Go, ``bench/loadgen/``): build it once, run one phase.

Build: ``go build -trimpath`` of the module in ``bench/loadgen`` into
``~/.cache/popfleet/loadgen-<digest>/loadgen``, where the digest covers ``go.mod``,
``go.sum`` and every ``.go`` file, so a changed source or dependency builds anew
and an unchanged one is reused; the binary is never committed. The ``go`` command
is the one on ``PATH``, else ``/usr/local/go/bin/go``; ``GOFLAGS=-mod=readonly``
makes a ``go.sum`` that does not match fail the build instead of being rewritten.
Any build or module-fetch failure raises :class:`LoadgenUnavailable` with the
tail of go's output: the benchmark and its smoke test fail loudly, never skip.

Run: :func:`run_phase` starts the binary for one phase (``-system``, ``-phase``,
... as :class:`Phase` lists them), optionally inside another process's network
namespace (``nsenter --net``; RocketMQ runs in a private one), bounded in time,
and returns the figures of the JSON line the binary prints (:func:`parse_result`).

Callers: :mod:`bench.pop_peers_loadgen`, ``tests/integration/bench``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "bench" / "loadgen"
FRONT_SOURCE = ROOT / "broker_image" / "front"
CACHE = Path.home() / ".cache" / "popfleet"
GO_FALLBACK = Path("/usr/local/go/bin/go")
BUILD_TIMEOUT_S = 1200.0


class LoadgenUnavailable(RuntimeError):
    """The Go toolchain is missing, or the load generator did not build."""


def source_digest(source: Path = SOURCE) -> str:
    """12 hex digits of SHA-256 over go.mod, go.sum and the .go files (names and bytes)."""
    digest = hashlib.sha256()
    files = [source / "go.mod", source / "go.sum", *sorted(source.glob("*.go"))]
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def binary_path(source: Path = SOURCE, *, cache: Path = CACHE, name: str = "loadgen") -> Path:
    return cache / f"{name}-{source_digest(source)}" / name


def go_command() -> str:
    found = shutil.which("go")
    if found:
        return found
    if GO_FALLBACK.is_file():
        return str(GO_FALLBACK)
    raise LoadgenUnavailable(
        "no Go toolchain: put /usr/local/go/bin on PATH (make bench and make test do)"
    )


def ensure_built(source: Path = SOURCE, *, cache: Path = CACHE, name: str = "loadgen") -> Path:
    """The binary for the current sources, built when it is not in the cache yet.

    Also builds the broker's front end (``name="popfront"``, :data:`FRONT_SOURCE`).
    """
    target = binary_path(source, cache=cache, name=name)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}
    argv = [go_command(), "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), "."]
    try:
        out = subprocess.run(
            argv,
            cwd=source,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise LoadgenUnavailable(f"go build timed out after {BUILD_TIMEOUT_S} s") from exc
    if out.returncode != 0 or not partial.is_file():
        raise LoadgenUnavailable(
            f"{' '.join(argv)} (in {source}) failed with {out.returncode}:\n"
            f"{(out.stderr or out.stdout)[-3000:]}"
        )
    partial.replace(target)
    return target


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


if __name__ == "__main__":  # `make peer-loadgen` / `make front`: build (or find) it, say where
    import sys

    if sys.argv[1:] == ["popfront"]:
        print(ensure_built(FRONT_SOURCE, name="popfront"))
    else:
        print(ensure_built())
