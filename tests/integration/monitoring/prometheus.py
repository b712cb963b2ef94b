"""A real Prometheus (3.16, built by ``make prometheus-bin``) on 127.0.0.1 for the tests.

It scrapes static targets labelled as the chart's broker PodMonitor labels them on
Kubernetes (``job`` = ``<namespace>/<release>-brokers``, ``namespace``, ``pod``,
``cluster``, ``role``) and evaluates the chart's PrometheusRule, rendered by the real
``helm template``. Scrape and rule evaluation run every second so the tests wait seconds,
not minutes; every wait is a polled deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from popfleet_testbed import binaries

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "popfleet"
RELEASE = "popfleet"
NAMESPACE = "shop"  # where the brokers "run"; the release is rendered there too
BROKERS_JOB = f"{NAMESPACE}/{RELEASE}-brokers"  # prometheus-operator: <namespace>/<PodMonitor>
KUBE_VERSION = "1.33.13"
Obj = dict[str, Any]


def tool(variable: str, make_target: str) -> Path:
    """A path make exports (``make test`` builds it first); fail loudly without."""
    value = os.environ.get(variable)
    if not value or not Path(value).exists():
        pytest.fail(f"${variable} is not set or missing ({value!r}): run `make {make_target}`")
    return Path(value)


def render_rules(*sets: str) -> list[Obj]:
    """The chart's PrometheusRule groups, rendered by helm with ``sets``."""
    helm = binaries.locate().helm
    args = [a for s in ("monitoring.prometheusRule.enabled=true", *sets) for a in ("--set", s)]
    out = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), "-n", NAMESPACE,
         "--kube-version", KUBE_VERSION, "--show-only", "templates/prometheusrule.yaml", *args],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    (rule,) = [d for d in yaml.safe_load_all(out) if d]
    groups: list[Obj] = rule["spec"]["groups"]
    return groups


@dataclass(frozen=True, slots=True)
class Target:
    """One scrape target: ``port`` on 127.0.0.1 with the labels the PodMonitor gives it."""

    port: int
    pod: str
    role: str
    cluster: str = "demo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Prometheus:
    """Query API of a running server (see :func:`running`)."""

    def __init__(self, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
        self.port = port
        self.process = process
        self.log = log

    def _get(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as reply:
            answer = json.loads(reply.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[Obj]:
        """The instant vector ``expr`` evaluates to now (a PromQL error fails the test)."""
        try:
            data = self._get("/api/v1/query", query=expr)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{expr}: {e.read().decode()}") from e
        assert data["resultType"] == "vector", (expr, data["resultType"])
        result: list[Obj] = data["result"]
        return result

    def alerts(self, name: str) -> list[Obj]:
        """Active (pending or firing) alerts called ``name``."""
        found: list[Obj] = self._get("/api/v1/alerts")["alerts"]
        return [a for a in found if a["labels"]["alertname"] == name]

    def targets_up(self) -> dict[str, float]:
        """``up`` per scraped role."""
        return {s["metric"]["role"]: float(s["value"][1]) for s in self.query("up")}

    def wait(self, condition: Callable[[], bool], *, what: str, timeout_s: float) -> float:
        """Poll ``condition`` (every 0.2 s) until it holds; the seconds it took."""
        began = time.monotonic()
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited while waiting for {what}:\n{self.logs()}")
            if time.monotonic() - began > timeout_s:
                raise AssertionError(f"no {what} within {timeout_s:.0f} s")
            time.sleep(0.2)
        return time.monotonic() - began

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


def config(targets: Sequence[Target], rule_file: Path | None) -> Obj:
    groups: dict[tuple[str, str], list[Target]] = {}
    for t in targets:
        groups.setdefault((t.pod, t.role), []).append(t)
    static = [
        {
            "targets": [f"127.0.0.1:{t.port}" for t in members],
            "labels": {
                "namespace": NAMESPACE,
                "pod": pod,
                "role": role,
                "cluster": members[0].cluster,
            },
        }
        for (pod, role), members in groups.items()
    ]
    doc: Obj = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                   "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": BROKERS_JOB, "static_configs": static}],
    }  # fmt: skip
    if rule_file is not None:
        doc["rule_files"] = [str(rule_file)]
    return doc


@contextlib.contextmanager
def running(
    work_dir: Path, targets: Sequence[Target], *, rules: Sequence[Obj] | None = None
) -> Iterator[Prometheus]:
    """Prometheus scraping ``targets`` and evaluating ``rules``; stopped by its PID."""
    binary = tool("POPFLEET_PROMETHEUS", "prometheus-bin")
    work_dir.mkdir(parents=True, exist_ok=True)
    rule_file = None
    if rules is not None:
        rule_file = work_dir / "popfleet.rules.yaml"
        rule_file.write_text(yaml.safe_dump({"groups": list(rules)}))
    config_file = work_dir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config(targets, rule_file)))
    port = free_port()
    log = work_dir / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(binary), f"--config.file={config_file}",
             f"--storage.tsdb.path={work_dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, cwd=work_dir,
        )  # fmt: skip
    server = Prometheus(port, process, log)
    try:
        server.wait(lambda: _ready(port), what="prometheus ready", timeout_s=60)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        print(server.logs())  # shown by pytest only when the test failed


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False
