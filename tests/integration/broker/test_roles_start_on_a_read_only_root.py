"""Broker roles (and the other images' entry points) start on a read-only root, HOME unset.

Why: a broker pod runs with ``readOnlyRootFilesystem``, ``HOME=/nonexistent`` and only
``/data`` (the claim) and ``/tmp`` (an emptyDir) writable; the operator and the audit
jobs likewise. Importing the official client's package used to create
``~/logs/rocketmq_python`` and reconfigure logging, so every role died at start on a real
cluster. ``readonlyroot.py`` enforces the read-only root with an audit hook (these tests
may run as root, which ignores permission bits) and reports what imports did to logging.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("readonlyroot.py")
BIN = Path(sys.executable).parent
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0

ROLE_MODULES = (  # what `popbroker store|popack|revive|all` and the demo import
    "popbroker.cli",
    "popbroker.roles.store",
    "popbroker.roles.popack",
    "popbroker.roles.revive",
    "popbroker.roles.all",
    "popbroker.roles.demo",
)
OTHER_IMAGES = (  # the operator image (read-only root, WORKDIR /tmp) and the audit jobs
    "popfleet_operator.__main__",
    "popfleet_operator.handlers.audits",
    "popfleet_operator.handlers.clusters",
    "popfleet_operator.handlers.groups",
    "popfleet_operator.handlers.settings",
    "popfleet_operator.handlers.topics",
    "popfleet_api.cli",
    "popfleet_audit.main",
)


@dataclass(frozen=True)
class Pod:
    """A stand-in for a pod's file system: a read-only cwd, the writable volumes."""

    cwd: Path
    data: Path
    tmp: Path

    def env(self, home: str = "/nonexistent") -> dict[str, str]:
        return {
            **os.environ,
            "HOME": home,
            "TMPDIR": str(self.tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        }

    def driver(self, *, imports: Sequence[str] = (), report: Path | None = None) -> list[str]:
        args = [sys.executable, str(DRIVER), "--writable", str(self.data)]
        args += ["--writable", str(self.tmp)]
        args += [a for m in imports for a in ("--import", m)]
        return args + (["--report", str(report)] if report else [])


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[Pod]:
    cwd, data, scratch = tmp_path / "root", tmp_path / "data", tmp_path / "tmp"
    for path in (cwd, data, scratch):
        path.mkdir()
    cwd.chmod(0o555)
    try:
        yield Pod(cwd=cwd, data=data, tmp=scratch)
    finally:
        cwd.chmod(0o755)


def run(
    pod: Pod, args: list[str], *, home: str = "/nonexistent"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=pod.cwd, env=pod.env(home), capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def test_role_modules_import_without_writing_or_touching_logging(pod: Pod) -> None:
    report = pod.data / "report.json"
    done = run(pod, pod.driver(imports=(*ROLE_MODULES, *OTHER_IMAGES), report=report))
    assert done.returncode == 0, done.stderr
    assert "REFUSED WRITE" not in done.stderr
    seen = json.loads(report.read_text())
    assert seen["root_handlers"] == ["Sentinel"]  # nothing added, nothing removed
    assert seen["sentinel_closed"] is False  # logging.config.dictConfig closes every handler
    assert seen["rocketmq_handlers"] == []  # the client's log configuration never ran
    assert "rocketmq.grpc_protocol.service_pb2_grpc" in seen["imported"]
    assert "rocketmq" not in seen["imported"]  # the client package itself was not executed


def test_a_writable_home_stays_empty(tmp_path: Path, pod: Pod) -> None:
    """Where HOME can be written (a laptop, CI), importing the roles still writes nothing."""
    home = pod.tmp / "home"
    home.mkdir()
    done = run(pod, pod.driver(imports=ROLE_MODULES), home=str(home))
    assert done.returncode == 0, done.stderr
    assert list(home.iterdir()) == []
    assert not list(tmp_path.rglob("logs"))


@pytest.mark.parametrize(
    "script_args",
    [
        ["popbroker", "--help"],
        ["popbroker", "store", "--help"],
        ["popbroker", "popack", "--help"],
        ["popbroker", "revive", "--help"],
        ["popbroker", "all", "--help"],
        ["popfleet-admin", "--help"],
        ["popfleet-audit", "--help"],
    ],
    ids=" ".join,
)
def test_entry_points_answer_help(pod: Pod, script_args: list[str]) -> None:
    script, *args = script_args
    done = run(pod, [*pod.driver(), "--", str(BIN / script), *args])
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower()
    assert "REFUSED WRITE" not in done.stderr


def _start(pod: Pod, name: str, args: list[str]) -> subprocess.Popen[str]:
    log = (pod.tmp / f"{name}.log").open("w")
    try:
        return subprocess.Popen(
            [*pod.driver(), "--", str(BIN / "popbroker"), *args],
            cwd=pod.cwd, env=pod.env(), stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    finally:
        log.close()


def _wait_for(path: Path, procs: Sequence[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not path.exists():
        for proc in procs:
            assert proc.poll() is None, f"{proc.args!r} exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{path.name} did not appear"
        time.sleep(0.05)


def _stop(procs: Sequence[subprocess.Popen[str]]) -> list[int | None]:
    codes: list[int | None] = []
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            codes.append(proc.wait(timeout=STOP_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
            codes.append(None)
    return codes


def _metrics(pod: Pod, name: str) -> list[str]:
    return ["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", str(pod.data / name)]


@pytest.mark.parametrize("deployment", ["all", "roles"])
def test_roles_start_and_stop_cleanly(pod: Pod, deployment: str) -> None:
    """Started as in a pod (the data volume and /tmp writable, nothing else), each role
    serves (its port files appear: the last thing it does before serving) and stops on
    SIGTERM with status 0, having written nothing outside the volumes."""
    data, sock = pod.data / "store", pod.data / "store.sock"
    procs: list[subprocess.Popen[str]] = []
    try:
        if deployment == "all":
            procs.append(_start(pod, "all", [
                "all", "--data-dir", str(data), "--listen", "127.0.0.1:0",
                "--port-file", str(pod.data / "port"), "--admin-listen", "127.0.0.1:0",
                "--admin-port-file", str(pod.data / "admin-port"), *_metrics(pod, "all.metrics"),
            ]))  # fmt: skip
            ready = ["port", "admin-port", "all.metrics"]
        else:
            procs.append(_start(pod, "store", [
                "store", "--data-dir", str(data), "--socket", str(sock),
                *_metrics(pod, "store.metrics"),
            ]))  # fmt: skip
            _wait_for(pod.data / "store.metrics", procs)
            procs.append(_start(pod, "popack", [
                "popack", "--store-socket", str(sock), "--listen", "127.0.0.1:0",
                "--port-file", str(pod.data / "port"), *_metrics(pod, "popack.metrics"),
            ]))  # fmt: skip
            procs.append(_start(pod, "revive", [
                "revive", "--store-socket", str(sock), *_metrics(pod, "revive.metrics"),
            ]))  # fmt: skip
            ready = ["port", "popack.metrics", "revive.metrics"]
        for name in ready:
            _wait_for(pod.data / name, procs)
    finally:
        codes = _stop(procs)
    logs = "\n".join(p.read_text() for p in sorted(pod.tmp.glob("*.log")))
    assert "REFUSED WRITE" not in logs, logs
    assert codes == [0] * len(procs), logs


CLIENT_AFTER_PROTOCOL = """
import logging, sys
import popbroker.grpc.protocol as protocol
assert "rocketmq" not in sys.modules, "the placeholder package was left behind"
import rocketmq
from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2
assert rocketmq.Producer.__module__ == "rocketmq.v5.producer.producer"
assert definition_pb2 is protocol.definition and service_pb2 is protocol.service
assert MessagingServiceStub is protocol.MessagingServiceStub
assert logging.getLogger("rocketmq-python-client").handlers, "the client's own __init__ ran"
print("ok")
"""

CLIENT_BEFORE_PROTOCOL = """
import rocketmq
from rocketmq.grpc_protocol import definition_pb2
import popbroker.grpc.protocol as protocol
assert protocol.definition is definition_pb2
assert rocketmq.Producer
print("ok")
"""


@pytest.mark.parametrize(
    "program", [CLIENT_AFTER_PROTOCOL, CLIENT_BEFORE_PROTOCOL], ids=["after", "before"]
)
def test_the_official_client_shares_the_process(pod: Pod, program: str) -> None:
    """Tests run the official client beside in-process brokers: importing the broker's
    protocol first must leave ``import rocketmq`` working and the generated modules shared
    (one descriptor registration), in either order."""
    home = pod.tmp / "home"  # the client's own import writes its log directory there
    home.mkdir()
    done = run(pod, [sys.executable, "-c", program], home=str(home))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
