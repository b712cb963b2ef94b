"""Render charts/popfleet with the testbed's pinned helm (``helm template``), as dicts."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from popfleet_testbed import binaries

CHART = Path(__file__).resolve().parents[4] / "charts" / "popfleet"
Obj = dict[str, Any]


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries.locate().helm), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def render(*sets: str, namespace: str = "popfleet-system") -> list[Obj]:
    args = ["template", "rel", str(CHART), "-n", namespace, "--kube-version", "1.33.0"]
    for value in sets:
        args += ["--set", value]
    done = helm(*args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(docs: list[Obj], kind: str) -> list[Obj]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def is_hook(doc: Obj) -> bool:
    return "helm.sh/hook" in ((doc.get("metadata") or {}).get("annotations") or {})


def release_objects(docs: list[Obj]) -> list[Obj]:
    """What ``helm install`` keeps running (hooks, like the uninstall clean-up, left out)."""
    return [d for d in docs if not is_hook(d)]


def hooks(docs: list[Obj]) -> list[Obj]:
    return [d for d in docs if is_hook(d)]
