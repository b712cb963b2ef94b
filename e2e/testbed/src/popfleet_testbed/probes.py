"""Readiness, liveness and startup probes: one attempt of each handler, and their bookkeeping.

Why: the operator's StatefulSets rely on probes (gRPC health for brokers) to gate rollouts;
a testbed that marks every pod Ready at once would hide exactly the ordering bugs the e2e tests
are for. Handlers: ``grpc`` (``grpc.health.v1.Health/Check``, encoded by hand: the request is
``field 1 = service``; the response's ``field 1`` is the status, 1 = SERVING), ``httpGet``
(2xx/3xx succeed), ``tcpSocket`` (connect succeeds), ``exec`` (exit 0 succeeds).

Network rule: probes only ever connect to the pod's loopback IP (127.<b>.x.y). An ``httpGet.host``
or ``grpc`` target elsewhere is refused (the probe fails), never dialled.

``ProbeState`` applies Kubernetes' thresholds: ``initialDelaySeconds`` after container start,
every ``periodSeconds``, ``successThreshold`` consecutive successes to pass and
``failureThreshold`` consecutive failures to fail. Attempts run on a thread pool owned by the
kubelet; this module only says *when* an attempt is due and folds in the result.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

Obj = dict[str, Any]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _port(value: object, container: Obj) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    if text.isdigit():
        return int(text)
    for port in container.get("ports") or []:
        if port.get("name") == text:
            return int(port["containerPort"])
    raise ValueError(f"unknown named port {text!r}")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _grpc_serving(response: bytes) -> bool:
    """True when the HealthCheckResponse's field 1 (varint) is 1 (SERVING)."""
    i = 0
    while i < len(response):
        tag = response[i]
        i += 1
        if tag == 0x08:  # field 1, wire type 0
            return response[i] == 1
        return False
    return False  # empty message: status UNKNOWN (0)


def attempt(
    probe: Obj,
    *,
    pod_ip: str,
    container: Obj,
    env: Mapping[str, str],
    cwd: Path,
    rewrite: Callable[[str], str],
) -> tuple[bool, str]:
    """Run one probe attempt; return (success, message)."""
    timeout_s = float(probe.get("timeoutSeconds", 1))
    try:
        if "exec" in probe:
            argv: Sequence[str] = [rewrite(w) for w in probe["exec"]["command"]]
            done = subprocess.run(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout_s,
                check=False,
            )
            return done.returncode == 0, f"exit code {done.returncode}"
        if "httpGet" in probe:
            h = probe["httpGet"]
            host = h.get("host") or pod_ip
            if not _loopback(host):
                return False, f"refusing to probe non-loopback host {host}"
            port = _port(h["port"], container)
            conn: http.client.HTTPConnection
            if str(h.get("scheme", "HTTP")).upper() == "HTTPS":
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                conn = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=ctx)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
            try:
                headers = {x["name"]: x["value"] for x in h.get("httpHeaders") or []}
                conn.request("GET", h.get("path", "/"), headers=headers)
                status = conn.getresponse().status
            finally:
                conn.close()
            return 200 <= status < 400, f"HTTP {status}"
        if "tcpSocket" in probe:
            t = probe["tcpSocket"]
            host = t.get("host") or pod_ip
            if not _loopback(host):
                return False, f"refusing to probe non-loopback host {host}"
            with socket.create_connection((host, _port(t["port"], container)), timeout=timeout_s):
                return True, "connected"
        if "grpc" in probe:
            g = probe["grpc"]
            service = str(g.get("service") or "").encode()
            request = b"\x0a" + _varint(len(service)) + service if service else b""
            with grpc.insecure_channel(f"{pod_ip}:{int(g['port'])}") as channel:
                check = channel.unary_unary("/grpc.health.v1.Health/Check")
                response = check(request, timeout=timeout_s)
            ok = _grpc_serving(bytes(response))
            return ok, "SERVING" if ok else "NOT_SERVING"
    except (OSError, subprocess.SubprocessError, http.client.HTTPException, ValueError) as exc:
        return False, str(exc)
    except grpc.RpcError as exc:
        return False, f"gRPC {exc}"
    return False, "probe has no handler"


@dataclass(slots=True)
class ProbeState:
    """Threshold bookkeeping for one probe of one container run."""

    spec: Obj
    started_mono: float
    passed: bool = False
    successes: int = 0
    failures: int = 0
    next_mono: float = 0.0

    def __post_init__(self) -> None:
        self.next_mono = self.started_mono + float(self.spec.get("initialDelaySeconds", 0))

    def due(self, now_mono: float) -> bool:
        return now_mono >= self.next_mono

    def record(self, ok: bool, now_mono: float) -> None:
        self.next_mono = now_mono + float(self.spec.get("periodSeconds", 10))
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= int(self.spec.get("successThreshold", 1)):
                self.passed = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= int(self.spec.get("failureThreshold", 3)):
                self.passed = False

    @property
    def failed(self) -> bool:
        """The failure threshold was reached (liveness/startup: restart the container)."""
        return self.failures >= int(self.spec.get("failureThreshold", 3))
