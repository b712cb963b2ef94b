"""The e2e test process's way into the kind pod network: a CONNECT proxy pod + port-forward.

Why: the scenario (on the host) dials broker pod IPs — the client endpoints that routes
advertise and the admin port — and kind enforces NetworkPolicies, under which brokers admit
their admin port only from pods labelled like the operator. So the run starts
``connect_proxy.py`` in such a pod (namespace ``popfleet-e2e-access``, the operator image,
non-root, read-only root filesystem), ``kubectl port-forward``s to it and sets ``grpc_proxy``
in this process: every gRPC channel then goes through the proxy, which only connects to the
pod network. No host route, no root. (``kind_access.through_proxy`` also hands the proxy to
the admin client explicitly: that client ignores the environment's proxies.)

``kubectl port-forward`` exits when its stream to the pod breaks ("lost connection to pod",
an error on one forwarded connection): the tunnel keeps it up, on the same local port (the
URL in ``grpc_proxy`` stays right), and says why each time on stderr. A run that needs
more than ``MAX_RESTARTS`` gives up (the next call is refused and fails its step).

``manifests`` is pure and ``export_proxy`` only touches the environment (both tested in
tests/integration/kind_static); ``Tunnel`` runs kubectl.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

KIND_DIR = Path(__file__).resolve().parent
NAMESPACE = "popfleet-e2e-access"
POD = "e2e-proxy"
PORT = 3128
Obj = dict[str, Any]
PROXY_VARIABLES = ("grpc_proxy", "no_grpc_proxy")
MAX_RESTARTS = 20


def export_proxy(url: str, environ: MutableMapping[str, str] = os.environ) -> dict[str, str | None]:
    """Send every gRPC channel this process makes through ``url``; the values replaced.

    gRPC core reads ``grpc_proxy`` (lower case) when each channel is made (the official
    client has no proxy setting of its own), and still dials directly what ``no_grpc_proxy``
    (else ``no_proxy``) lists: set empty, it lists nothing and hides ``no_proxy`` from gRPC
    only (kubectl and helm still read ``NO_PROXY``/``no_proxy`` for the apiserver).
    """
    previous = {name: environ.get(name) for name in PROXY_VARIABLES}
    environ["grpc_proxy"] = url
    environ["no_grpc_proxy"] = ""
    return previous


def restore_environment(
    previous: dict[str, str | None], environ: MutableMapping[str, str] = os.environ
) -> None:
    for name, value in previous.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value


def manifests(
    *, image: str, pull_policy: str, allow_cidr: str, node: str | None = None
) -> list[Obj]:
    """Namespace, the proxy's code as a ConfigMap, and the proxy Pod; on ``node`` when given
    (``make e2e-nodes`` keeps it on the control plane, which no step kills: the host's only
    way to the pods must outlive the workers it loses)."""
    part_of = {"app.kubernetes.io/part-of": "popfleet-e2e"}
    meta: Obj = {"namespace": NAMESPACE, "labels": part_of}
    container = {
        "name": "proxy",
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["python", "/proxy/connect_proxy.py"],
        "env": [
            {"name": "ALLOW_CIDR", "value": allow_cidr},
            # Service names (a replicated set's NAME-i.<ns>.svc in routes), resolved in the
            # pod; only their addresses inside ALLOW_CIDR are dialled (connect_proxy).
            {"name": "ALLOW_DOMAINS", "value": ".svc"},
            {"name": "LISTEN", "value": f"0.0.0.0:{PORT}"},
        ],
        "ports": [{"name": "proxy", "containerPort": PORT}],
        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 2},
        "volumeMounts": [{"name": "code", "mountPath": "/proxy", "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod_labels = {
        # The brokers' NetworkPolicy admits the admin port from pods named like the operator.
        "app.kubernetes.io/name": "popfleet-operator",
        "app.kubernetes.io/component": "e2e-proxy",
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": POD, **meta},
            "data": {"connect_proxy.py": (KIND_DIR / "connect_proxy.py").read_text()},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": POD, **meta, "labels": {**part_of, **pod_labels}},
            "spec": {
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 10001,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "automountServiceAccountToken": False,
                "containers": [container],
                "volumes": [{"name": "code", "configMap": {"name": POD}}],
                **(
                    {}
                    if node is None
                    else {
                        "nodeName": node,
                        "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
                    }
                ),
            },
        },
    ]


class Tunnel:
    """Proxy pod up, port-forward running, ``grpc_proxy`` set; all undone by ``close``."""

    def __init__(self, kubectl: Path, kubeconfig: Path) -> None:
        self.kubectl = kubectl
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.forward: subprocess.Popen[str] | None = None
        self._replaced: dict[str, str | None] | None = None
        self._closing = threading.Event()
        self._said: deque[str] = deque(maxlen=5)

    def _run(self, *args: str, stdin: str | None = None, timeout_s: float = 120) -> str:
        done = subprocess.run(
            [str(self.kubectl), *args], input=stdin, capture_output=True, text=True,
            env=self.env, timeout=timeout_s, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def open(self, objects: list[Obj], *, timeout_s: float = 120) -> str:
        """Start everything; the ``grpc_proxy`` URL now in effect.

        A namespace of that name still terminating (the previous run's, on a ``--reuse``d
        cluster: ``close`` does not wait) is waited out first: a proxy pod applied into it
        would be killed with it."""
        self._run(
            "wait", "--for=delete", f"namespace/{NAMESPACE}", f"--timeout={int(timeout_s)}s",
            timeout_s=timeout_s + 10,
        )  # fmt: skip
        listing = {"apiVersion": "v1", "kind": "List", "items": objects}
        self._run("apply", "-f", "-", stdin=json.dumps(listing))
        wait_for = f"--timeout={int(timeout_s)}s"
        self._run(
            "wait", "-n", NAMESPACE, f"pod/{POD}", "--for=condition=Ready", wait_for,
            timeout_s=timeout_s + 10,
        )  # fmt: skip
        port = self._start_forward(f":{PORT}")
        url = f"http://127.0.0.1:{port}"
        self._replaced = export_proxy(url)
        threading.Thread(target=self._keep_forwarding, args=(port,), daemon=True).start()
        return url

    def _start_forward(self, ports: str) -> int:
        """``kubectl port-forward`` running; the local port it reports."""
        self.forward = subprocess.Popen(
            [str(self.kubectl), "port-forward", "-n", NAMESPACE, f"pod/{POD}", ports],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env,
        )  # fmt: skip
        port = self._forwarded_port(deadline=time.monotonic() + 30)
        # kubectl writes a line per proxied connection ("Handling connection for ..."), and
        # every admin call is a new connection: unread, the pipe fills and the tunnel stalls.
        self._said = deque(maxlen=5)  # its last words on stderr
        threading.Thread(target=_drain, args=(self.forward.stdout, None), daemon=True).start()
        threading.Thread(target=_drain, args=(self.forward.stderr, self._said), daemon=True).start()
        return port

    def _keep_forwarding(self, port: int) -> None:
        """Restart the port-forward on ``port`` whenever it exits, until ``close``."""
        restarts = 0
        while self.forward is not None:
            code = self.forward.wait()
            if self._closing.is_set():
                return
            said = " | ".join(self._said) or "nothing on stderr"
            if restarts == MAX_RESTARTS:
                print(f"e2e-kind: port-forward exited ({code}: {said}); restarted "
                      f"{restarts} times, left down", file=sys.stderr, flush=True)  # fmt: skip
                return
            restarts += 1
            print(
                f"e2e-kind: port-forward to the proxy pod exited ({code}: {said}); "
                f"restart {restarts}/{MAX_RESTARTS} on 127.0.0.1:{port}",
                file=sys.stderr, flush=True,
            )  # fmt: skip
            try:
                self._start_forward(f"{port}:{PORT}")
            except RuntimeError as exc:
                print(f"e2e-kind: port-forward not restarted: {exc}", file=sys.stderr, flush=True)
                return

    def _forwarded_port(self, *, deadline: float) -> int:
        assert self.forward is not None and self.forward.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.forward.stdout], [], [], 1.0)
            if not ready:
                continue
            line = self.forward.stdout.readline()
            if not line:
                break  # kubectl exited
            # "Forwarding from 127.0.0.1:40123 -> 3128"
            if line.startswith("Forwarding from 127.0.0.1:"):
                return int(line.split(":", 1)[1].split()[0])
        raise RuntimeError("kubectl port-forward did not report a local port in time")

    def close(self) -> None:
        self._closing.set()
        if self._replaced is not None:
            restore_environment(self._replaced)
            self._replaced = None
        if self.forward is not None:
            self.forward.terminate()
            try:
                self.forward.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.forward.kill()
        self._run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


def _drain(stream: Any, keep: deque[str] | None) -> None:
    with stream:  # closed at kubectl's exit
        for line in iter(stream.readline, ""):
            if keep is not None and line.strip():
                keep.append(line.strip())
