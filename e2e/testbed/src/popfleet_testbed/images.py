"""Image names → local entry points: what the process kubelet runs instead of pulling images.

Why: there is no container runtime and no registry here. A pod's ``image`` is looked up in
``TABLE`` by repository (registry host, tag and digest ignored:
``ghcr.io/popfleet/broker:0.1.0@sha256:...`` → ``popfleet/broker``); the entry plays the role
of the image's ENTRYPOINT and CMD, with Docker/Kubernetes semantics:

- no ``command`` and no ``args``: ``entrypoint + cmd``;
- ``args`` only: ``entrypoint + args``;
- ``command`` given: ``command + args`` (the entry point is replaced). A bare ``command[0]``
  (no ``/``) is looked up in the venv's ``bin`` first, then on the host ``PATH``.

``{python}`` is the interpreter running the kubelet (the repo's ``.venv/bin/python``) and
``{bin}`` its directory, so our images run our packages from the repo's venv. Entries for
packages that are not installed yet simply fail to start with a clear message in the
container's log and status.

Extra entries can be supplied without code changes through ``POPFLEET_TESTBED_IMAGES``, a JSON
object ``{"repo/name": {"entrypoint": [...], "cmd": [...]}}`` read by the kubelet at start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from popfleet_testbed import errors


@dataclass(frozen=True, slots=True)
class Image:
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    doc: str = ""


TABLE: dict[str, Image] = {
    "popfleet/broker": Image(
        ("{bin}/popbroker",), doc="the broker (all three roles): broker_image's console script"
    ),
    "popfleet/operator": Image(
        ("{python}", "-m", "popfleet_operator"), doc="the kopf operator package"
    ),
    "popfleet/audit": Image(
        ("{bin}/popfleet-audit",),
        doc="the audit CLI (spark_operator_jobs); the operator's audit Jobs set their command "
        "(popfleet-audit, or spark-submit for a k8s:// master), found in the venv's bin",
    ),
    "popfleet/testbed-probe": Image(
        ("{python}", "-m", "popfleet_testbed.testimage"),
        ("serve",),
        doc="the testbed's self-test image: HTTP server, file writes, exit codes, API calls",
    ),
    "busybox": Image((), ("sh",), doc="host shell tools (sh, cat, sleep, ...) from PATH"),
}

_DIGEST = re.compile(r"@sha256:[0-9a-f]+$")


def repository(image: str) -> str:
    """``[registry/]repo[:tag][@digest]`` → ``repo`` (``library/`` dropped as Docker does)."""
    name = _DIGEST.sub("", image)
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    if parts[0] == "library" and len(parts) > 1:
        parts = parts[1:]
    return "/".join(parts)


def table() -> dict[str, Image]:
    """The built-in table plus ``POPFLEET_TESTBED_IMAGES`` entries."""
    merged = dict(TABLE)
    extra = os.environ.get("POPFLEET_TESTBED_IMAGES")
    if extra:
        doc: dict[str, Any] = json.loads(extra)
        for repo, entry in doc.items():
            merged[repo] = Image(
                tuple(entry.get("entrypoint", ())), tuple(entry.get("cmd", ())), "from env"
            )
    return merged


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: unknown references stay verbatim, ``$$`` is ``$``."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(repl, value)


def _placeholders(word: str) -> str:
    return word.replace("{python}", sys.executable).replace(
        "{bin}", str(Path(sys.executable).parent)
    )


def _lookup(word: str, path: str) -> str:
    if "/" in word:
        return word
    venv = Path(sys.executable).parent / word
    if venv.is_file():
        return str(venv)
    found = shutil.which(word, path=path)
    return found or word


def argv(
    image: str,
    *,
    command: Sequence[str] | None,
    args: Sequence[str] | None,
    env: Mapping[str, str],
    images: Mapping[str, Image] | None = None,
) -> list[str]:
    """The process argv for a container; raises ``TestbedError`` for unknown images."""
    repo = repository(image)
    entry = (images if images is not None else table()).get(repo)
    if entry is None:
        raise errors.TestbedError(f"image {image!r} ({repo}) is not in the testbed image table")
    if command:
        words = [*command, *(args or [])]
    else:
        words = [*(_placeholders(w) for w in entry.entrypoint), *(args if args else entry.cmd)]
    words = [expand(w, env) for w in words]
    if not words:
        raise errors.TestbedError(f"image {image!r} has no entry point and the pod no command")
    words[0] = _lookup(words[0], env.get("PATH", os.defpath))
    return words
