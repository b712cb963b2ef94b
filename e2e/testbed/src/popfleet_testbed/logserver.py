"""The kubelet's log endpoint, so that ``kubectl logs`` works against the testbed.

Why: debugging an operator or broker pod in e2e tests starts with ``kubectl logs``. The
apiserver serves ``pods/log`` by calling the kubelet at the Node's InternalIP (127.0.0.1) and
``daemonEndpoints.kubeletEndpoint.Port`` over HTTPS with its kubelet client certificate; this
module is that endpoint and nothing more (no exec, attach or port-forward).

``GET /containerLogs/<namespace>/<pod>/<container>`` with the kubelet's query parameters
``previous``, ``tailLines``, ``limitBytes`` and ``follow`` (``follow`` streams appended lines
until the client goes away or the run's log stops growing for ``FOLLOW_IDLE_S`` after the
container ended). TLS: serving certificate ``kubelet.crt`` from the testbed CA; clients must
present a certificate signed by the same CA (the apiserver's ``apiserver-kubelet-client``).
"""

from __future__ import annotations

import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FOLLOW_IDLE_S = 1.0
FOLLOW_MAX_S = 3600.0


def _runs(state: Path, namespace: str, pod: str, container: str) -> list[Path]:
    """Log files of the newest pod of that name, oldest run first."""
    pod_dirs = sorted(
        (state / "pods").glob(f"{namespace}_{pod}_*"), key=lambda p: p.stat().st_mtime
    )
    if not pod_dirs:
        return []
    logs = (pod_dirs[-1] / "logs" / container).glob("*.log")
    return sorted(logs, key=lambda p: int(p.stem))


def _tail(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class _Handler(BaseHTTPRequestHandler):
    state: Path  # set on the subclass made by ``serve``

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            self.send_error(404, "only /containerLogs/<ns>/<pod>/<container> is served")
            return
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        runs = _runs(self.state, parts[1], parts[2], parts[3])
        if query.get("previous") == "true":
            runs = runs[:-1]
        if not runs:
            self.send_error(404, f"no logs for {'/'.join(parts[1:])}")
            return
        path = runs[-1]
        data = path.read_bytes()
        if "tailLines" in query:
            data = _tail(data, int(query["tailLines"]))
        if "limitBytes" in query:
            data = data[: int(query["limitBytes"])]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if query.get("follow") != "true":
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.end_headers()
        self._follow(path, data, start=path.stat().st_size)

    def _follow(self, path: Path, first: bytes, *, start: int) -> None:
        try:
            self.wfile.write(first)
            self.wfile.flush()
            offset, idle_since = start, time.monotonic()
            deadline = time.monotonic() + FOLLOW_MAX_S
            while time.monotonic() < deadline:
                size = path.stat().st_size
                if size > offset:
                    with path.open("rb") as f:
                        f.seek(offset)
                        chunk = f.read(size - offset)
                    offset = size
                    idle_since = time.monotonic()
                    self.wfile.write(chunk)
                    self.wfile.flush()
                elif time.monotonic() - idle_since > FOLLOW_IDLE_S and _ended(path):
                    return
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError, OSError):
            return

    def log_message(self, format: str, *args: object) -> None:
        return  # request logs would drown the kubelet's own


def _ended(path: Path) -> bool:
    """True once the container run that writes ``path`` has no pid file any more."""
    pid_file = path.parents[2] / "containers" / f"{path.parent.name}.pid"
    newer = [p for p in path.parent.glob("*.log") if int(p.stem) > int(path.stem)]
    return bool(newer) or not pid_file.exists()


def serve(state: Path, *, pki_dir: Path, port: int) -> ThreadingHTTPServer:
    """Start the endpoint on 127.0.0.1:``port`` in a daemon thread; return the server."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki_dir / "kubelet.crt"), str(pki_dir / "kubelet.key"))
    ctx.load_verify_locations(cafile=str(pki_dir / "ca.crt"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    handler = type("LogHandler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="logserver", daemon=True).start()
    return server
