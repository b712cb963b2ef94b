"""Build the project's Go programs into ``~/.cache/popfleet`` (never committed).

Two modules are built this way: the broker's front end ``popfront``
(``broker_image/front``, :data:`FRONT`) and the benchmark's load generator
(``bench/loadgen``, :data:`LOADGEN`). :func:`ensure_built` runs ``go build -trimpath``
into ``~/.cache/popfleet/<name>-<digest>/<name>``, where the digest covers ``go.mod``,
``go.sum`` and every ``.go`` file: a changed source or dependency builds anew, an
unchanged one is reused. The ``go`` command is the one on ``PATH``, else
``/usr/local/go/bin/go``; ``GOFLAGS=-mod=readonly`` makes a ``go.sum`` that does not
match fail the build instead of being rewritten. Any build or module-fetch failure
raises :class:`GoBuildFailed` with the tail of go's output: callers fail loudly.

:func:`front_argv` is popfront's command line, the one place the harness and the
benchmark spell it (the operator's pod builder has its own, for the pod).

``python -m tools.gobuild popfront|loadgen`` builds one and prints its path (``make
front``, ``make peer-loadgen``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path.home() / ".cache" / "popfleet"
GO_FALLBACK = Path("/usr/local/go/bin/go")
BUILD_TIMEOUT_S = 1200.0


@dataclass(frozen=True, slots=True)
class GoModule:
    name: str  # the binary's name and its cache directory's prefix
    source: Path


FRONT = GoModule("popfront", ROOT / "broker_image" / "front")
LOADGEN = GoModule("loadgen", ROOT / "bench" / "loadgen")
MODULES = {module.name: module for module in (FRONT, LOADGEN)}


class GoBuildFailed(RuntimeError):
    """The Go toolchain is missing, or a module did not build."""


def source_digest(source: Path) -> str:
    """12 hex digits of SHA-256 over go.mod, go.sum and the .go files (names and bytes)."""
    digest = hashlib.sha256()
    files = [source / "go.mod", source / "go.sum", *sorted(source.glob("*.go"))]
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def binary_path(module: GoModule, *, cache: Path = CACHE) -> Path:
    return cache / f"{module.name}-{source_digest(module.source)}" / module.name


def go_command() -> str:
    found = shutil.which("go")
    if found:
        return found
    if GO_FALLBACK.is_file():
        return str(GO_FALLBACK)
    raise GoBuildFailed(
        "no Go toolchain: put /usr/local/go/bin on PATH (make test and make bench do)"
    )


def ensure_built(module: GoModule, *, cache: Path = CACHE) -> Path:
    """The binary for the module's current sources, built when it is not cached yet."""
    target = binary_path(module, cache=cache)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Per process: test workers may build the same sources at once (each replaces the
    # target atomically with the same binary; a shared partial file would be moved away
    # under the other's build).
    partial = target.with_suffix(f".partial-{os.getpid()}")
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}
    argv = [go_command(), "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), "."]
    try:
        out = subprocess.run(
            argv,
            cwd=module.source,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise GoBuildFailed(f"go build timed out after {BUILD_TIMEOUT_S} s") from exc
    if out.returncode != 0 or not partial.is_file():
        raise GoBuildFailed(
            f"{' '.join(argv)} (in {module.source}) failed with {out.returncode}:\n"
            f"{(out.stderr or out.stdout)[-3000:]}"
        )
    partial.replace(target)
    return target


def front_argv(
    binary: Path,
    *,
    listen: str,
    socket_path: Path,
    port_file: Path,
    tls: tuple[str, ...] = (),
    frames: bool = True,
    metrics_listen: str | None = None,
) -> list[str]:
    """popfront on ``listen`` (host:port), forwarding to popack on ``socket_path``,
    writing its bound port to ``port_file``; ``tls`` is ``-tls-cert F -tls-key F`` or empty;
    ``frames`` False keeps every call on gRPC (``-frames off``, for comparisons);
    ``metrics_listen`` (host:port) serves popfront's /metrics."""
    return [
        str(binary),
        "-listen", listen,
        "-upstream", f"unix://{socket_path}",
        "-port-file", str(port_file),
        *tls,
        *(() if frames else ("-frames", "off")),
        *(() if metrics_listen is None else ("-metrics-listen", metrics_listen)),
    ]  # fmt: skip


if __name__ == "__main__":
    names = sys.argv[1:]
    if len(names) != 1 or names[0] not in MODULES:
        sys.exit(f"usage: python -m tools.gobuild {{{'|'.join(MODULES)}}}")
    print(ensure_built(MODULES[names[0]]))
