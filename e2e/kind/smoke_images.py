"""Smoke test of the built images the way a hardened cluster runs them (stage 6 of run.sh).

Why: the chart and the operator run every container non-root with a read-only root filesystem,
and a cluster may pick any UID (OpenShift's restricted SCC does) with no home directory. An
image that writes outside its volumes at start (as the broker did: a dependency created
``~/logs`` on import) crashes on such a cluster and nowhere else. So each image's entry point
is started here with ``--read-only``, a random non-root UID/GID, ``HOME=/nonexistent``, no
capabilities and ``no-new-privileges``, writable only where the deployments mount volumes
(``/tmp``, the broker's data directory), and must answer health:

* broker: the three roles and the front end in four containers sharing one data directory,
  as in the pod (``store`` -> gRPC health SERVING on the admin port; ``popack`` on its Unix
  socket behind ``popfront`` -> health SERVING on the client port, through the front end;
  ``revive`` -> ``/metrics`` 200);
* operator: ``python -m popfleet_operator`` against the kind cluster (read-only kubeconfig,
  host network so it reaches the API server on 127.0.0.1, an empty watched namespace so it
  reconciles nothing) -> the operator's ``/healthz`` (its liveness thread) answers 200;
* audit: ``popfleet-audit --help`` and a PySpark ``local[1]`` job to completion.

Ports are published on 127.0.0.1 only. Every container is removed afterwards, pass or fail.

    python e2e/kind/smoke_images.py --kubeconfig K BROKER_IMAGE OPERATOR_IMAGE AUDIT_IMAGE
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

DEADLINE_S = 90.0
ADMIN_PORT = 9877
CLIENT_PORT = 8081
REVIVE_METRICS_PORT = 9102


class SmokeError(Exception):
    """An image failed to start hardened; the message carries its logs."""


def docker(*args: str, timeout_s: float = 120, check: bool = True) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and done.returncode != 0:
        raise SmokeError(f"docker {' '.join(args[:3])}...: {done.stderr.strip()}")
    return done.stdout


def hardened(uid: int, *extra: str) -> list[str]:
    """``docker run`` flags of a restricted pod: read-only root, random UID, no home."""
    return [
        "--read-only",
        f"--user={uid}:{uid}",
        "--env=HOME=/nonexistent",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
        f"--tmpfs=/tmp:rw,nosuid,nodev,size=256m,uid={uid},gid={uid},mode=1777",
        *extra,
    ]


def published(container: str, port: int) -> str:
    """``127.0.0.1:N`` that the engine mapped to the container's ``port``."""
    out = docker("port", container, f"{port}/tcp").split()
    if not out:
        raise SmokeError(f"{container}: port {port} is not published")
    return out[0]


def logs(container: str) -> str:
    done = subprocess.run(
        ["docker", "logs", "--tail", "40", container],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return (done.stdout + done.stderr).strip()


def running(container: str) -> bool:
    state = docker("inspect", "-f", "{{.State.Running}}", container, check=False).strip()
    return state == "true"


def wait_serving(container: str, target: str, service: str = "") -> None:
    """Until ``grpc.health.v1`` at ``target`` says SERVING (the container must stay up)."""
    deadline = time.monotonic() + DEADLINE_S
    last = "no answer"
    options = (("grpc.enable_http_proxy", 0),)
    while time.monotonic() < deadline:
        if not running(container):
            raise SmokeError(f"{container} exited:\n{logs(container)}")
        with grpc.insecure_channel(target, options=options) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            except grpc.RpcError as exc:
                last = f"{exc.code().name}"
            else:
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
        time.sleep(0.5)
    raise SmokeError(f"{container}: health at {target} is {last}:\n{logs(container)}")


@contextlib.contextmanager
def containers() -> Iterator[list[str]]:
    started: list[str] = []
    try:
        yield started
    finally:
        for name in started:
            docker("rm", "-f", name, check=False)


def smoke_broker(image: str, uid: int, tag: str) -> str:
    with tempfile.TemporaryDirectory(prefix="popfleet-smoke-") as data, containers() as started:
        os.chown(data, uid, uid)
        volume = [f"--volume={data}:/data"]
        socket_path = "/data/store.sock"
        store, popack, revive, front = (
            f"popfleet-smoke-{role}-{tag}" for role in ("store", "popack", "revive", "front")
        )
        run = ["run", "-d", "--name"]
        started.append(store)
        docker(*run, store, *hardened(uid, *volume, f"--publish=127.0.0.1::{ADMIN_PORT}"), image,
               "store", "--data-dir=/data/store", f"--socket={socket_path}",
               f"--admin-listen=0.0.0.0:{ADMIN_PORT}", "--cluster=smoke",
               "--broker-name=smoke-0")  # fmt: skip
        wait_serving(store, published(store, ADMIN_PORT))
        started.append(popack)
        docker(*run, popack, *hardened(uid, *volume), image,
               "popack", f"--store-socket={socket_path}", "--data-dir=/data/store",
               "--listen=unix:/data/popack.sock",
               f"--advertise=127.0.0.1:{CLIENT_PORT}")  # fmt: skip
        started.append(front)
        docker(*run, front, *hardened(uid, *volume, f"--publish=127.0.0.1::{CLIENT_PORT}"),
               "--entrypoint=popfront", image,
               f"-listen=0.0.0.0:{CLIENT_PORT}", "-upstream=unix:///data/popack.sock")  # fmt: skip
        wait_serving(front, published(front, CLIENT_PORT))
        started.append(revive)
        docker(*run, revive, *hardened(uid, *volume, f"--publish=127.0.0.1::{REVIVE_METRICS_PORT}"),
               image, "revive", f"--store-socket={socket_path}", "--data-dir=/data/store",
               f"--metrics-listen=0.0.0.0:{REVIVE_METRICS_PORT}")  # fmt: skip
        wait_http(revive, f"http://{published(revive, REVIVE_METRICS_PORT)}/metrics")
        return "store health SERVING, popack's through popfront SERVING, revive /metrics 200"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(container: str, url: str) -> None:
    """Until ``url`` answers 200 (the container must stay up); direct, never via a proxy."""
    deadline = time.monotonic() + DEADLINE_S
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        if not running(container):
            raise SmokeError(f"{container} exited:\n{logs(container)}")
        with contextlib.suppress(OSError), opener.open(url, timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.5)
    raise SmokeError(f"{container}: {url} never answered 200:\n{logs(container)}")


def smoke_operator(image: str, uid: int, tag: str, kubeconfig: Path) -> str:
    port = free_port()
    name = f"popfleet-smoke-operator-{tag}"
    with tempfile.TemporaryDirectory(prefix="popfleet-smoke-") as kube, containers() as started:
        Path(kube).chmod(0o755)  # the container's random UID must read the kubeconfig
        config = Path(kube) / "config"
        config.write_text(kubeconfig.read_text())
        config.chmod(0o644)
        started.append(name)
        docker("run", "-d", "--name", name, "--network=host",
               *hardened(uid, f"--volume={kube}:/kube:ro", "--env=KUBECONFIG=/kube/config",
                         "--env=POPFLEET_NAMESPACES=popfleet-smoke-nothing-here",
                         f"--env=POPFLEET_HEALTH_LISTEN=127.0.0.1:{port}"),
               image)  # fmt: skip
        wait_http(name, f"http://127.0.0.1:{port}/healthz")
        return "operator /healthz 200"


SPARK_JOB = (  # the audit's own session builder, as `popfleet-audit` runs it
    "from popfleet_audit import session\n"
    "s = session.build('local[1]', app_name='smoke')\n"
    "n = s.range(1000).selectExpr('sum(id) AS t').first().t\n"
    "assert n == 499500, n\n"
    "s.stop()\n"
    "print('spark ok')\n"
)


def smoke_audit(image: str, uid: int, tag: str) -> str:
    base = ["run", "--rm", "--name", f"popfleet-smoke-audit-{tag}", *hardened(uid), image]
    docker(*base, "popfleet-audit", "--help")
    out = docker(*base, "python", "-c", SPARK_JOB, timeout_s=300)
    if "spark ok" not in out:
        raise SmokeError(f"the PySpark job did not finish:\n{out}")
    return "popfleet-audit --help and a local[1] PySpark job"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("broker")
    parser.add_argument("operator")
    parser.add_argument("audit")
    args = parser.parse_args(argv)
    uid = random.randint(20_000, 60_000)  # not 0, not the image's own
    tag = f"{os.getpid()}"
    checks: tuple[tuple[str, Callable[[], str]], ...] = (
        ("broker", lambda: smoke_broker(args.broker, uid, tag)),
        ("operator", lambda: smoke_operator(args.operator, uid, tag, args.kubeconfig)),
        ("audit", lambda: smoke_audit(args.audit, uid, tag)),
    )
    failed = 0
    for what, check in checks:
        started = time.monotonic()
        try:
            summary = check()
        except (SmokeError, subprocess.TimeoutExpired) as exc:
            failed += 1
            print(f"   smoke {what}: FAILED (uid {uid}): {exc}", file=sys.stderr, flush=True)
        else:
            print(
                f"   smoke {what}: {summary} (uid {uid}, {time.monotonic() - started:.0f}s)",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
