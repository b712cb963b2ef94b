"""A handle on a running testbed for tests: API access, kubectl/helm, pods, logs.

Why: the testbed tests and later the operator's e2e tests need the same few moves — apply
manifests, wait for pods, read a container's log, dial a pod on its loopback IP — and each
must wait with a deadline rather than sleep. ``Cluster`` bundles them around one admin
``kube.Kube`` and the binaries the testbed was started with.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from popfleet_testbed import controlplane, errors, kube, waiting

Obj = dict[str, Any]


@dataclass
class Cluster:
    info: controlplane.Info
    admin: kube.Kube = field(init=False)

    def __post_init__(self) -> None:
        self.admin = kube.Kube(self.info.layout.admin_kubeconfig)

    @property
    def kubeconfig(self) -> Path:
        return self.info.layout.admin_kubeconfig

    def close(self) -> None:
        self.admin.close()

    # -- tools ------------------------------------------------------------------------------

    def _tool(self, binary: Path, args: Sequence[str], stdin: str | None, timeout_s: float) -> str:
        env = {
            "KUBECONFIG": str(self.kubeconfig),
            "HOME": str(self.info.run_dir / "home"),
            "PATH": f"{self.info.bin_dir}:/usr/bin:/bin",
        }
        done = subprocess.run(
            [str(binary), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0:
            raise errors.TestbedError(
                f"{binary.name} {' '.join(args)} failed ({done.returncode}):\n{done.stderr}"
            )
        return done.stdout

    def kubectl(self, *args: str, stdin: str | None = None, timeout_s: float = 60) -> str:
        return self._tool(self.info.binaries.kubectl, args, stdin, timeout_s)

    def helm(self, *args: str, timeout_s: float = 120) -> str:
        return self._tool(self.info.binaries.helm, args, None, timeout_s)

    def apply(self, namespace: str, *objects: Obj) -> None:
        doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
        self.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(doc))

    # -- namespaces and pods ----------------------------------------------------------------

    def new_namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.admin.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        waiting.until(
            lambda: self.admin.get_or_none(kube.ns_path(name, "serviceaccounts", "default")),
            timeout_s=30,
            what=f"default ServiceAccount in {name}",
        )
        return name

    def delete_namespace(self, name: str) -> None:
        self.admin.delete(f"/api/v1/namespaces/{name}")

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self.admin.get_or_none(kube.ns_path(namespace, "pods", name))

    def pods(self, namespace: str, selector: str) -> list[Obj]:
        return self.admin.items(kube.ns_path(namespace, "pods"), {"labelSelector": selector})

    @staticmethod
    def is_ready(pod: Obj | None) -> bool:
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return False
        conditions = pod.get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def wait_ready(
        self, namespace: str, selector: str, count: int, timeout_s: float = 60
    ) -> list[Obj]:
        """Wait until exactly ``count`` pods match and all are Ready; return them."""

        def check() -> list[Obj] | None:
            pods = [
                p
                for p in self.pods(namespace, selector)
                if not p["metadata"].get("deletionTimestamp")
            ]
            if len(pods) == count and all(self.is_ready(p) for p in pods):
                return pods
            return None

        return waiting.until(
            check,
            timeout_s=timeout_s,
            what=f"{count} ready pods {selector} in {namespace}",
            state=lambda: self.describe_pods(namespace, selector),
        )

    def describe_pods(self, namespace: str, selector: str, log_lines: int = 40) -> str:
        """Each matching pod's phase, conditions and containers, and the kubelet's last lines
        about the namespace: what a failed wait reports, so a flake can be read afterwards."""
        lines = []
        for pod in self.pods(namespace, selector):
            status = pod.get("status", {})
            conditions = " ".join(
                f"{c['type']}={c['status']}" for c in status.get("conditions") or []
            )
            containers = "; ".join(
                f"{c['name']} restarts={c.get('restartCount')} state={c.get('state')}"
                for c in status.get("containerStatuses") or []
            )
            deleting = " deleting" if pod["metadata"].get("deletionTimestamp") else ""
            lines.append(
                f"pod {pod['metadata']['name']}{deleting}: phase={status.get('phase')} "
                f"[{conditions}] {containers}"
            )
        if not lines:
            lines.append(f"no pod matches {selector}")
        events = self.admin.items(kube.ns_path(namespace, "events"))
        events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        lines.append(f"events in {namespace}:")
        lines.extend(
            f"  {e.get('lastTimestamp') or e.get('eventTime')} {e['involvedObject'].get('kind')}/"
            f"{e['involvedObject'].get('name')} {e.get('reason')}: {e.get('message')}"
            for e in events[-20:]
        )
        kubelet_log = self.info.layout.logs / "kubelet.log"
        if kubelet_log.exists():
            about = [
                line
                for line in kubelet_log.read_text(errors="replace").splitlines()
                if f"{namespace}/" in line or f"{namespace}_" in line or "tick failed" in line
            ]
            lines.append(f"kubelet.log, last {log_lines} lines about {namespace}:")
            lines.extend(about[-log_lines:])
        return "\n".join(lines)

    def wait_phase(self, namespace: str, name: str, phase: str, timeout_s: float = 60) -> Obj:
        def check() -> Obj | None:
            pod = self.pod(namespace, name)
            return pod if pod is not None and pod.get("status", {}).get("phase") == phase else None

        return waiting.until(check, timeout_s=timeout_s, what=f"pod {namespace}/{name} {phase}")

    def pod_dir(self, pod: Obj) -> Path:
        meta = pod["metadata"]
        return self.info.layout.state / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"

    def log(self, pod: Obj, container: str | None = None, *, previous: bool = False) -> str:
        """The current run's log of ``container`` (default: the first container); with
        ``previous``, the run before it (``kubectl logs --previous``), "" when there is none."""
        name = container or pod["spec"]["containers"][0]["name"]
        logs = sorted((self.pod_dir(pod) / "logs" / name).glob("*.log"), key=lambda p: int(p.stem))
        index = -2 if previous else -1
        return logs[index].read_text(errors="replace") if len(logs) >= -index else ""

    @staticmethod
    def pod_ip(pod: Obj) -> str:
        ip = str(pod["status"]["podIP"])
        if not ip.startswith("127."):
            raise errors.TestbedError(f"refusing to dial non-loopback pod IP {ip}")
        return ip

    def http(self, pod: Obj, path: str, *, port: int = 8080, data: bytes | None = None) -> str:
        url = f"http://{self.pod_ip(pod)}:{port}{path}"
        req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
        with urllib.request.urlopen(req, timeout=5) as resp:
            return str(resp.read().decode())
