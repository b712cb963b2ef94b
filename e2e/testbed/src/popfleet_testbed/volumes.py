"""Pod volumes as directories on the host, and how a container process finds its mounts.

Why: with no container runtime there are no mount namespaces; a volume is a directory and
the process must be told where it is. Volume kinds and where they live (``<state>`` is the
kubelet's state root, ``<pod>`` = ``<state>/pods/<ns>_<name>_<uid>``):

===========================  =============================================================
emptyDir                     ``<pod>/volumes/<volume>/`` (removed with the pod)
configMap / secret           files written into ``<pod>/volumes/<volume>/`` (keys or items,
                             ``defaultMode``/``mode``), re-written on every refresh
downwardAPI                  files of fieldRef/resourceFieldRef values, same place
projected                    all of the above plus ``serviceAccountToken`` (TokenRequest API,
                             bound to the pod, renewed at 80 % of its lifetime); this is how
                             the standard ``kube-api-access-*`` volume (token, ca.crt,
                             namespace) appears
persistentVolumeClaim        the bound PV's ``hostPath.path``/``local.path`` (the provisioner
                             puts those under ``<state>/volumes/pvc-<uid>/``): survives pods
hostPath                     sandboxed to ``<state>/hostpath/<path>``; never the real path
===========================  =============================================================

How processes see them (documented in the README, set up by ``link_mounts``/``rewrite``):

1. ``<pod>/root`` (``POPFLEET_TESTBED_ROOT``) mirrors the container's view: for each
   ``volumeMount``, ``<pod>/root/<mountPath>`` is a symlink to the volume directory
   (+ ``subPath``); it is also the working directory unless ``workingDir`` is set.
2. Words in ``command``/``args``, env values and probe commands that *are* a mount path, start
   with ``<mountPath>/`` or contain ``=<mountPath>`` (``--data-dir=/data``), ``=unix:<mountPath>``
   or ``=unix://<mountPath>`` (gRPC socket targets) are rewritten to the host directory, so
   ``--data-dir /var/lib/broker`` works unchanged.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from popfleet_testbed import errors, podenv

Obj = dict[str, Any]

SERVICEACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# ``--flag=<mountPath>...`` and the gRPC socket forms ``=unix:<path>``, ``=unix://<path>``
SOCKET_PREFIXES = ("", "unix:", "unix://")


@dataclass(frozen=True, slots=True)
class Mount:
    mount_path: str
    host_path: Path
    read_only: bool


@dataclass(frozen=True, slots=True)
class Token:
    token: str
    issued_at: float
    expires_at: float

    def stale(self, now: float) -> bool:
        return now >= self.issued_at + 0.8 * (self.expires_at - self.issued_at)


class Sources(podenv.Sources, Protocol):
    def pvc(self, namespace: str, name: str) -> Obj | None: ...

    def pv(self, name: str) -> Obj | None: ...

    def token(
        self, pod: Obj, *, service_account: str, audience: str | None, expiration_s: int
    ) -> Token: ...


@dataclass(slots=True)
class PodVolumes:
    """Per-pod volume state kept by the kubelet between refreshes."""

    pod_dir: Path
    state_root: Path
    dirs: dict[str, Path] = field(default_factory=dict)
    tokens: dict[tuple[str, str], Token] = field(default_factory=dict)


def _write_file(path: Path, data: bytes, mode: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode if mode is not None else 0o644)
    tmp.replace(path)


def _write_keys(
    target: Path, data: dict[str, bytes], items: Sequence[Obj] | None, mode: int | None
) -> None:
    if items:
        for item in items:
            if item["key"] in data:
                _write_file(target / item["path"], data[item["key"]], item.get("mode", mode))
    else:
        for key, value in data.items():
            _write_file(target / key, value, mode)


def _keyed_source(
    sources: Sources, namespace: str, spec: Obj, *, kind: str, target: Path, mode: int | None
) -> None:
    name = spec.get("name") or spec.get("secretName", "")
    if kind == "configMap":
        cm = sources.configmap(namespace, name)
        data = podenv.configmap_data(cm) if cm is not None else None
    else:
        secret = sources.secret(namespace, name)
        data = podenv.secret_data(secret) if secret is not None else None
    if data is None:
        if spec.get("optional"):
            return
        raise errors.NotReadyYet(f"{kind} {namespace}/{name} not found")
    _write_keys(target, data, spec.get("items"), spec.get("defaultMode", mode))


def _downward(pod: Obj, spec: Obj, *, target: Path, pod_ip: str, mode: int | None) -> None:
    containers = {c["name"]: c for c in pod["spec"].get("containers", [])}
    for item in spec.get("items") or []:
        if "fieldRef" in item:
            value = podenv.field_value(pod, item["fieldRef"]["fieldPath"], pod_ip=pod_ip)
        else:
            ref = item["resourceFieldRef"]
            value = podenv.resource_value(containers[ref["containerName"]], ref)
        _write_file(target / item["path"], value.encode(), item.get("mode", mode))


def _pvc_dir(sources: Sources, namespace: str, claim: str) -> Path:
    pvc = sources.pvc(namespace, claim)
    if pvc is None:
        raise errors.NotReadyYet(f"PVC {namespace}/{claim} not found")
    pv_name = pvc.get("spec", {}).get("volumeName")
    if not pv_name or pvc.get("status", {}).get("phase") != "Bound":
        raise errors.NotReadyYet(f"PVC {namespace}/{claim} is not bound yet")
    pv = sources.pv(pv_name)
    if pv is None:
        raise errors.NotReadyYet(f"PV {pv_name} not found")
    spec = pv["spec"]
    path = (spec.get("hostPath") or spec.get("local") or {}).get("path")
    if not path:
        raise errors.TestbedError(f"PV {pv_name} is neither hostPath nor local")
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def materialise(pod: Obj, vols: PodVolumes, *, sources: Sources, pod_ip: str) -> None:
    """Create or refresh every volume of ``pod``; raises ``NotReadyYet`` while one can't be."""
    namespace = pod["metadata"]["namespace"]
    now = time.time()
    for vol in pod["spec"].get("volumes") or []:
        name = vol["name"]
        target = vols.pod_dir / "volumes" / name
        if "persistentVolumeClaim" in vol:
            if name not in vols.dirs:
                claim = vol["persistentVolumeClaim"]["claimName"]
                vols.dirs[name] = _pvc_dir(sources, namespace, claim)
            continue
        if "hostPath" in vol:
            sandboxed = vols.state_root / "hostpath" / vol["hostPath"]["path"].lstrip("/")
            sandboxed.mkdir(parents=True, exist_ok=True)
            vols.dirs[name] = sandboxed
            continue
        target.mkdir(parents=True, exist_ok=True)
        if "configMap" in vol:
            _keyed_source(
                sources, namespace, vol["configMap"], kind="configMap", target=target, mode=None
            )
        elif "secret" in vol:
            _keyed_source(
                sources, namespace, vol["secret"], kind="secret", target=target, mode=None
            )
        elif "downwardAPI" in vol:
            _downward(pod, vol["downwardAPI"], target=target, pod_ip=pod_ip, mode=None)
        elif "projected" in vol:
            proj = vol["projected"]
            mode = proj.get("defaultMode")
            for src in proj.get("sources") or []:
                if "configMap" in src:
                    _keyed_source(
                        sources,
                        namespace,
                        src["configMap"],
                        kind="configMap",
                        target=target,
                        mode=mode,
                    )
                elif "secret" in src:
                    _keyed_source(
                        sources, namespace, src["secret"], kind="secret", target=target, mode=mode
                    )
                elif "downwardAPI" in src:
                    _downward(pod, src["downwardAPI"], target=target, pod_ip=pod_ip, mode=mode)
                elif "serviceAccountToken" in src:
                    sat = src["serviceAccountToken"]
                    key = (name, sat["path"])
                    token = vols.tokens.get(key)
                    if token is None or token.stale(now):
                        token = sources.token(
                            pod,
                            service_account=pod["spec"].get("serviceAccountName") or "default",
                            audience=sat.get("audience"),
                            expiration_s=int(sat.get("expirationSeconds", 3600)),
                        )
                        vols.tokens[key] = token
                        _write_file(target / sat["path"], token.token.encode(), mode or 0o644)
        # emptyDir (and anything unknown) is just the directory.
        vols.dirs[name] = target


def mounts(container: Obj, vols: PodVolumes) -> list[Mount]:
    """The container's volumeMounts resolved to host paths, longest mount path first."""
    result = []
    for vm in container.get("volumeMounts") or []:
        base = vols.dirs.get(vm["name"])
        if base is None:
            raise errors.NotReadyYet(f"volume {vm['name']} is not materialised")
        host = base / vm["subPath"] if vm.get("subPath") else base
        if vm.get("subPath"):
            host.mkdir(parents=True, exist_ok=True)
        result.append(Mount(vm["mountPath"].rstrip("/") or "/", host, bool(vm.get("readOnly"))))
    return sorted(result, key=lambda m: len(m.mount_path), reverse=True)


def link_mounts(root: Path, container_mounts: Sequence[Mount]) -> None:
    """Mirror the container's filesystem view under ``root`` with symlinks."""
    for m in container_mounts:
        link = root / m.mount_path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            if link.is_symlink() and Path(os.readlink(link)) == m.host_path:
                continue
            if link.is_symlink():
                link.unlink()
            else:
                continue  # a real directory (a parent of another mount): leave it
        link.symlink_to(m.host_path)


def rewriter(container_mounts: Sequence[Mount]) -> Callable[[str], str]:
    """A function mapping container paths in a word to host paths (see the module doc)."""

    def rewrite(word: str) -> str:
        for m in container_mounts:
            mp, host = m.mount_path, str(m.host_path)
            if word == mp:
                return host
            if word.startswith(mp + "/"):
                return host + word[len(mp) :]
            for prefix in SOCKET_PREFIXES:
                marker = "=" + prefix + mp
                idx = word.find(marker)
                if idx >= 0:
                    rest = word[idx + len(marker) :]
                    if rest == "" or rest.startswith("/"):
                        return word[: idx + 1 + len(prefix)] + host + rest
        return word

    return rewrite
