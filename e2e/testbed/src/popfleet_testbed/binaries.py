"""Where the testbed's executables come from.

Why: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd are built from
the Go tools module ``tools/k8s`` (see its ``build.sh``), helm with ``go install``; the build
is cached under ``~/.cache/popfleet/k8s-<version>-<hash>/`` and skipped when the binaries are
there and report the pinned versions. ``build.sh`` prints that directory as its last line, so
this module never duplicates the cache key. ``POPFLEET_K8S_BIN`` names a directory to use
instead (no build, no check).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from popfleet_testbed import errors

NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "helm")


@dataclass(frozen=True, slots=True)
class Binaries:
    directory: Path

    @property
    def etcd(self) -> Path:
        return self.directory / "etcd"

    @property
    def kube_apiserver(self) -> Path:
        return self.directory / "kube-apiserver"

    @property
    def kube_controller_manager(self) -> Path:
        return self.directory / "kube-controller-manager"

    @property
    def kube_scheduler(self) -> Path:
        return self.directory / "kube-scheduler"

    @property
    def kubectl(self) -> Path:
        return self.directory / "kubectl"

    @property
    def helm(self) -> Path:
        return self.directory / "helm"


def repo_root() -> Path:
    """The popfleet checkout this package is installed from (editable install)."""
    env = os.environ.get("POPFLEET_REPO")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        if (parent / "tools" / "k8s" / "build.sh").is_file():
            return parent
    raise errors.TestbedError("cannot find the popfleet checkout; set POPFLEET_REPO")


def locate() -> Binaries:
    """Return the binaries, building them first when the cache is cold (20-40 min)."""
    env = os.environ.get("POPFLEET_K8S_BIN")
    if env:
        found = Binaries(Path(env))
    else:
        script = repo_root() / "tools" / "k8s" / "build.sh"
        out = subprocess.run([str(script)], check=True, stdout=subprocess.PIPE, text=True).stdout
        found = Binaries(Path(out.strip().splitlines()[-1]))
    missing = [n for n in NAMES if not (found.directory / n).is_file()]
    if missing:
        raise errors.TestbedError(f"missing in {found.directory}: {', '.join(missing)}")
    return found
