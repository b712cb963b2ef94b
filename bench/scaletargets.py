"""Where ``bench.operator_scale`` runs: the local testbed, or a kind cluster.

Both give the benchmark the same few moves (:class:`Target`): an API client, kubectl and
helm, the pods of a selector, a pod's log, a pod's ``/metrics``, and a sample of the
operator process's memory and CPU time. What differs:

* **testbed** (``make bench``): a fresh control plane per size; the operator is a host
  process under the process kubelet, sampled from ``/proc`` (RSS, utime + stime); pods'
  ``/metrics`` dialled on their loopback pod IPs. No memory limit is enforced.
* **kind** (``make bench-kind``): a fresh kind cluster per size, created by
  ``e2e/kind/run.sh --bench`` with our images loaded; the operator runs in its container
  under the chart's memory limit (the kubelet OOM-kills it past the limit: a restart).
  The host never dials a pod: a pod's ``/metrics`` (the operator's ``process_*`` series
  included, for RSS and CPU) is read through the apiserver's pod proxy, and the apiserver
  is reached on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from popfleet_testbed import cluster, kube

Obj = dict[str, Any]
OPERATOR_NS = "popfleet-system"
OPERATOR_SELECTOR = "app.kubernetes.io/name=popfleet-operator"
OPERATOR_METRICS_PORT = 9090  # the chart's operator.metricsPort
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    at: float  # monotonic
    rss_bytes: int
    cpu_s: float


class Target(Protocol):
    """What the benchmark needs of a cluster with the chart installed."""

    name: str
    helm_values: tuple[str, ...]  # extra ``--set`` pairs for the chart

    @property
    def admin(self) -> kube.Kube: ...

    @property
    def kubeconfig(self) -> Path: ...

    def kubectl(self, *args: str, stdin: str | None = None, timeout_s: float = 60) -> str: ...

    def helm(self, *args: str, timeout_s: float = 120) -> str: ...

    def pods(self, namespace: str, selector: str) -> list[Obj]: ...

    def log(self, pod: Obj) -> str: ...

    def metrics(self, pod: Obj, port: int) -> str: ...

    def operator_sample(self) -> Sample | None: ...


def metric_value(text: str, name: str) -> float | None:
    """The first sample named ``name`` in a Prometheus exposition (None when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return None


@dataclass
class TestbedTarget:
    """The local testbed; the operator process is read from /proc (its kubelet's pid file)."""

    tb: cluster.Cluster
    name: str = "testbed"
    helm_values: tuple[str, ...] = ()

    @property
    def admin(self) -> kube.Kube:
        return self.tb.admin

    @property
    def kubeconfig(self) -> Path:
        return self.tb.kubeconfig

    def kubectl(self, *args: str, stdin: str | None = None, timeout_s: float = 60) -> str:
        return self.tb.kubectl(*args, stdin=stdin, timeout_s=timeout_s)

    def helm(self, *args: str, timeout_s: float = 120) -> str:
        return self.tb.helm(*args, timeout_s=timeout_s)

    def pods(self, namespace: str, selector: str) -> list[Obj]:
        return self.tb.pods(namespace, selector)

    def log(self, pod: Obj) -> str:
        return self.tb.log(pod)

    def metrics(self, pod: Obj, port: int) -> str:
        return self.tb.http(pod, "/metrics", port=port)

    def operator_sample(self) -> Sample | None:
        pods = self.tb.pods(OPERATOR_NS, OPERATOR_SELECTOR)
        if not pods:
            return None
        pid_file = self.tb.pod_dir(pods[0]) / "containers" / "operator.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
            stat = Path(f"/proc/{pid}/stat").read_text()
            status = Path(f"/proc/{pid}/status").read_text()
        except (OSError, ValueError, IndexError):
            return None
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)"
        cpu_s = (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
        rss = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        return Sample(time.monotonic(), int(rss.group(1)) * 1024 if rss else 0, cpu_s)


@dataclass
class KindTarget:
    """A kind cluster reached on 127.0.0.1 only: kubectl/helm, and pods via the apiserver."""

    kubeconfig: Path
    bin_dir: Path
    helm_values: tuple[str, ...] = ()
    name: str = "kind"
    _admin: kube.Kube = field(init=False)
    home: Path = field(init=False)

    def __post_init__(self) -> None:
        self._admin = kube.Kube(self.kubeconfig, timeout_s=60)
        self.home = self.kubeconfig.parent / "home"
        self.home.mkdir(exist_ok=True)

    @property
    def admin(self) -> kube.Kube:
        return self._admin

    def _tool(self, tool: str, args: tuple[str, ...], stdin: str | None, timeout_s: float) -> str:
        env = {
            "KUBECONFIG": str(self.kubeconfig),
            "HOME": str(self.home),
            "PATH": f"{self.bin_dir}:/usr/bin:/bin",
        }
        done = subprocess.run(
            [str(self.bin_dir / tool), *args],
            input=stdin, capture_output=True, text=True, env=env, timeout=timeout_s, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    def kubectl(self, *args: str, stdin: str | None = None, timeout_s: float = 60) -> str:
        return self._tool("kubectl", args, stdin, timeout_s)

    def helm(self, *args: str, timeout_s: float = 120) -> str:
        return self._tool("helm", args, None, timeout_s)

    def pods(self, namespace: str, selector: str) -> list[Obj]:
        found = self.admin.items(kube.ns_path(namespace, "pods"), {"labelSelector": selector})
        return [p for p in found if not p["metadata"].get("deletionTimestamp")]

    def log(self, pod: Obj) -> str:
        meta = pod["metadata"]
        return self.kubectl("logs", "-n", meta["namespace"], meta["name"], timeout_s=60)

    def metrics(self, pod: Obj, port: int) -> str:
        """The pod's /metrics, fetched by the apiserver (the host never dials a pod IP)."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}:{port}/proxy/metrics"
        return self.kubectl("get", "--raw", path, timeout_s=15)

    def operator_sample(self) -> Sample | None:
        """RSS and CPU time from the operator's own ``process_*`` metrics (prometheus_client)."""
        pods = self.pods(OPERATOR_NS, OPERATOR_SELECTOR)
        pods = [p for p in pods if (p.get("status") or {}).get("podIP")]
        if not pods:
            return None
        try:
            text = self.metrics(pods[0], OPERATOR_METRICS_PORT)
        except (RuntimeError, subprocess.TimeoutExpired):
            return None
        rss = metric_value(text, "process_resident_memory_bytes")
        cpu = metric_value(text, "process_cpu_seconds_total")
        if rss is None or cpu is None:
            return None
        return Sample(time.monotonic(), int(rss), cpu)
