"""The ``popfleet/testbed-probe`` image: a small program the testbed tests itself with.

Why: the testbed's own tests need a container whose behaviour they control — listen on the
pod IP, turn unready on request, write and read files in volumes, exit with a chosen code, and
call the API as an in-cluster client — without depending on the broker or the operator.

Subcommands (``python -m popfleet_testbed.testimage <cmd>``):

``serve`` (the default CMD)
    HTTP on ``$POD_IP:$PORT`` (defaults 127.0.0.1:8080). ``GET /healthz`` → 200;
    ``GET /ready`` → 200 or 503; ``POST /ready?value=false|true`` flips it;
    ``GET /file?path=<p>`` / ``POST /file?path=<p>`` read / write ``$DATA_DIR/<p>``;
    ``GET /env`` → the environment as JSON. ``$WRITE_FILE=<path>=<text>`` writes a file at
    start. SIGTERM → exit 0 promptly, unless ``$IGNORE_SIGTERM=1`` (then only SIGKILL stops
    it). ``$GRPC_PORT`` also serves ``grpc.health.v1.Health/Check`` (SERVING while ready).
``exit --code N [--after-s S] [--write PATH=TEXT]``
    optionally write a file, wait, exit with ``N``.
``kube-get --check PATH=STATUS ...``
    GET each API ``PATH`` as the pod's service account (token, CA from
    ``$POPFLEET_SERVICEACCOUNT_DIR``, else the standard path; server from
    ``KUBERNETES_SERVICE_HOST/PORT``); print ``PATH STATUS``; exit 0 iff every status matches.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STANDARD_SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class _State:
    ready = True
    grpc_server: object = None


def _data_path(query: str) -> Path:
    rel = urllib.parse.parse_qs(query).get("path", ["data.txt"])[0]
    base = Path(os.environ.get("DATA_DIR", "."))
    target = (base / rel).resolve()
    if not target.is_relative_to(base.resolve()):
        raise ValueError("path escapes DATA_DIR")
    return target


class _Handler(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/healthz":
            self._answer(200, b"ok")
        elif url.path == "/ready":
            self._answer(200 if _State.ready else 503, b"ready" if _State.ready else b"unready")
        elif url.path == "/env":
            self._answer(200, json.dumps(dict(os.environ)).encode(), "application/json")
        elif url.path == "/file":
            try:
                self._answer(200, _data_path(url.query).read_bytes())
            except (OSError, ValueError) as exc:
                self._answer(404, str(exc).encode())
        else:
            self._answer(404, b"not found")

    def do_POST(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if url.path == "/ready":
            value = urllib.parse.parse_qs(url.query).get("value", ["true"])[0]
            _State.ready = value == "true"
            self._answer(200, b"ok")
        elif url.path == "/file":
            try:
                target = _data_path(url.query)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(body)
                self._answer(200, b"written")
            except (OSError, ValueError) as exc:
                self._answer(400, str(exc).encode())
        else:
            self._answer(404, b"not found")

    def log_message(self, format: str, *args: object) -> None:
        sys.stdout.write(f"{self.address_string()} {format % args}\n")


def _write_spec(spec: str) -> None:
    path, _, text = spec.partition("=")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def serve() -> int:
    host = os.environ.get("POD_IP", "127.0.0.1")
    port = int(os.environ.get("PORT", "8080"))
    if os.environ.get("WRITE_FILE"):
        _write_spec(os.environ["WRITE_FILE"])
    server = ThreadingHTTPServer((host, port), _Handler)
    if os.environ.get("GRPC_PORT"):
        _serve_grpc_health(host, int(os.environ["GRPC_PORT"]))
    if os.environ.get("IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
    else:
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"serving on {host}:{port}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    print("stopped on SIGTERM", flush=True)
    return 0


def _serve_grpc_health(host: str, port: int) -> None:
    """grpc.health.v1 Check without generated stubs: bytes in, ``status`` varint out."""
    import grpc  # noqa: PLC0415  (only this subcommand needs grpc)

    def check(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"\x08\x01" if _State.ready else b"\x08\x02"  # SERVING / NOT_SERVING

    handler = grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(check)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"{host}:{port}")
    server.start()
    _State.grpc_server = server


def kube_get(checks: Sequence[str]) -> int:
    sa_dir = Path(os.environ.get("POPFLEET_SERVICEACCOUNT_DIR", STANDARD_SA_DIR))
    token = (sa_dir / "token").read_text().strip()
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ["KUBERNETES_SERVICE_PORT"]
    ctx = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
    ok = True
    for check in checks:
        path, _, expected = check.rpartition("=")
        req = urllib.request.Request(
            f"https://{host}:{port}{path}", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                status = int(resp.status)
        except urllib.error.HTTPError as exc:
            status = exc.code
        print(f"{path} {status}", flush=True)
        ok = ok and str(status) == expected
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed-probe")
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("serve")
    p_exit = sub.add_parser("exit")
    p_exit.add_argument("--code", type=int, default=0)
    p_exit.add_argument("--after-s", type=float, default=0.0)
    p_exit.add_argument("--write")
    p_get = sub.add_parser("kube-get")
    p_get.add_argument("--check", action="append", default=[])
    args = parser.parse_args(argv)
    if args.cmd == "exit":
        if args.write:
            _write_spec(args.write)
        time.sleep(args.after_s)
        return int(args.code)
    if args.cmd == "kube-get":
        return kube_get(args.check)
    return serve()


if __name__ == "__main__":
    sys.exit(main())
