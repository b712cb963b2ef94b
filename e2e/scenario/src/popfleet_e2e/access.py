"""How the scenario reaches a cluster: a kubeconfig, kubectl and helm, and an endpoint resolver.

Why: the same scenario runs on the local testbed (e2e/local, ``make demo``) and on kind
(e2e/kind). Everything cluster-specific is in one value, ``ClusterAccess``:

* ``kubeconfig`` and ``bin_dir`` (where ``kubectl`` and ``helm`` are; None: from ``PATH``);
* ``namespace``: where the BrokerCluster, Topics and ConsumerGroups of the story live;
* ``resolve``: maps an in-cluster ``host:port`` (a broker's advertised client endpoint, or its
  admin port on the same host) to a ``host:port`` the test process can dial. In the testbed
  pod IPs are loopback addresses and the resolver only checks that (``loopback_only``).
  The official client also dials the endpoints that routes advertise, so those must be
  reachable from the test process as well;
* ``grpc_proxy``: an ``http://HOST:PORT`` CONNECT proxy every gRPC channel of the test
  process must go through (kind: the proxy pod behind a port-forward; the official client
  reads it from the ``grpc_proxy`` environment variable, which ``e2e/kind/proxy_tunnel.py``
  sets). None (the testbed): brokers are dialled directly;
* ``helm_values``: extra ``--set`` values for the install (image repositories on kind);
* ``node_exec`` and ``next_broker_image``: what the kind-only steps (``disruptions``) need;
  ``node_power``: kill or start a whole node (multi-node kind, ``nodeloss``);
  ``spark_operator``: the Spark operator build the SparkApplication step installs;
  ``monitoring``: prometheus-operator and Prometheus for the observability steps; ``keda``:
  KEDA for the elastic-consumers step; ``prometheus_url``: a Prometheus the host reaches
  directly (make demo's elastic act).

Every call has a deadline; a failing tool raises ``ScenarioError`` with its stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[4]
Obj = dict[str, Any]
Resolver = Callable[[str], str]


class ScenarioError(Exception):
    """A step of the scenario failed; the message says which and why."""


@dataclass(frozen=True)
class MonitoringBuild:
    """prometheus-operator and Prometheus built here (kind, issue 19): the operator's bundle
    (its CRDs, RBAC and Deployment, from its module) and the Prometheus image ``kind load``ed.
    Its own images carry the names the bundle names, so the bundle applies as it is."""

    bundle: Path
    prometheus_image: str  # tagged with its version: popfleet.local/prometheus:v3.16.0

    @property
    def prometheus_version(self) -> str:
        return self.prometheus_image.rpartition(":")[2]


@dataclass(frozen=True)
class KedaBuild:
    """KEDA built here (kind, issue 19): its kustomize tree (``config/`` of its module) and its
    operator and metrics apiserver images, ``kind load``ed."""

    config: Path
    operator_image: str
    adapter_image: str


@dataclass(frozen=True)
class SparkOperatorBuild:
    """The kubeflow Spark operator for the SparkApplication step (kind): its CRDs as v1 and
    its manifests (e2e/kind/sparkoperator; the image is built and loaded by run.sh)."""

    crds: Path
    manifests: Path


def loopback_only(endpoint: str) -> str:
    """The testbed's resolver: pod IPs are loopback; anything else is refused, never dialled."""
    host = endpoint.rsplit(":", 1)[0]
    if not host.startswith("127."):
        raise ScenarioError(f"refusing to dial non-loopback endpoint {endpoint}")
    return endpoint


@dataclass(frozen=True)
class ClusterAccess:
    kubeconfig: Path
    namespace: str
    resolve: Resolver = loopback_only
    bin_dir: Path | None = None
    release: str = "popfleet"
    release_namespace: str = "popfleet-system"
    chart: Path = REPO / "charts" / "popfleet"
    examples: Path = REPO / "crds" / "examples"
    helm_values: tuple[str, ...] = ()
    home: Path | None = field(default=None, repr=False)
    grpc_proxy: str | None = None
    # Real clusters only (kind): run a command on the node (root, the node's PID namespace),
    # and a second broker image already on the node for the rolling-upgrade step.
    node_exec: Callable[[Sequence[str]], str] | None = field(default=None, repr=False)
    next_broker_image: str | None = None
    # Multi-node kind only (``make e2e-nodes``): ``node_power("kill"|"start", node)`` kills a
    # whole node without warning (``docker kill`` of its container) or starts it again.
    node_power: Callable[[str, str], None] | None = field(default=None, repr=False)
    spark_operator: SparkOperatorBuild | None = None
    monitoring: MonitoringBuild | None = None
    keda: KedaBuild | None = None
    # Clients bootstrap from the brokers' client Service (its ClusterIP), as in-cluster users
    # do, instead of every pod IP: a bootstrap of pod IPs is lost once a rolling upgrade has
    # replaced every pod. Off on the testbed, whose ClusterIPs route nowhere.
    bootstrap_via_service: bool = False
    # Where the host (and KEDA) reach Prometheus directly: make demo's elastic act runs one on
    # loopback beside the testbed (``beside``). None: the cluster's, through the proxy pod.
    prometheus_url: str | None = None

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        if self.bin_dir is not None:
            env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        if self.home is not None:  # helm keeps its caches and repositories under HOME
            env["HOME"] = str(self.home)
        return env

    def run(self, tool: str, *args: str, stdin: str | None = None, timeout_s: float = 60) -> str:
        """Run ``kubectl``/``helm`` with this kubeconfig; its stdout, or ScenarioError."""
        try:
            done = subprocess.run(
                [tool, *args],
                input=stdin,
                capture_output=True,
                text=True,
                env=self._env(),
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ScenarioError(f"{tool} {' '.join(args)}: no answer in {timeout_s:.0f}s") from exc
        if done.returncode != 0:
            raise ScenarioError(
                f"{tool} {' '.join(args)} failed ({done.returncode}):\n{done.stderr.strip()}"
            )
        return done.stdout

    def kubectl(self, *args: str, stdin: str | None = None, timeout_s: float = 60) -> str:
        return self.run("kubectl", *args, stdin=stdin, timeout_s=timeout_s)

    def kubectl_stream(self, *args: str) -> subprocess.Popen[str]:
        """``kubectl ARGS`` left running (a watch), its stdout a text pipe; the caller ends it."""
        return subprocess.Popen(
            ["kubectl", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=self._env(),
        )  # fmt: skip

    def helm(self, *args: str, timeout_s: float = 240) -> str:
        return self.run("helm", *args, timeout_s=timeout_s)

    def get(self, kind: str, name: str = "", *, namespace: str | None = None) -> Obj:
        """``kubectl get -o json``; a list object when ``name`` is empty."""
        ns = namespace or self.namespace
        args = ["get", kind, *([name] if name else []), "-n", ns, "-o", "json"]
        return dict(json.loads(self.kubectl(*args)))

    def get_or_none(self, kind: str, name: str, *, namespace: str | None = None) -> Obj | None:
        ns = namespace or self.namespace
        out = self.kubectl("get", kind, name, "-n", ns, "-o", "json", "--ignore-not-found")
        return dict(json.loads(out)) if out.strip() else None

    def items(self, kind: str, *, namespace: str | None = None, selector: str = "") -> list[Obj]:
        ns = ["-A"] if namespace == "*" else ["-n", namespace or self.namespace]
        sel = ["-l", selector] if selector else []
        return list(json.loads(self.kubectl("get", kind, *ns, *sel, "-o", "json"))["items"])

    def apply_files(self, paths: Sequence[Path]) -> str:
        args = [a for p in paths for a in ("-f", str(p))]
        return self.kubectl("apply", "-n", self.namespace, *args)

    def merge_patch(self, kind: str, name: str, patch: Obj) -> str:
        body = json.dumps(patch)
        return self.kubectl("patch", kind, name, "-n", self.namespace, "--type=merge", "-p", body)
