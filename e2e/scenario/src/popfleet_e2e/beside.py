"""Prometheus and KEDA beside the local testbed: the elastic act of ``make demo`` (issue 19).

The act is the kind KEDA story (``elastic``) on the testbed: a slow consumer Deployment that
KEDA scales from 2 to 8 on the group's lag, flat in PULL, growing in POP. What it needs
besides the testbed is a Prometheus that scrapes the brokers and KEDA's operator and metrics
apiserver, all three built here from the Go module proxy (``make prometheus-bin keda-bin``).

Why they run beside the testbed, as host processes like its control plane, and not as its
pods: the process kubelet gives a pod no container filesystem and no cluster DNS. Prometheus's
Kubernetes discovery and KEDA read the in-cluster service-account files under
``/var/run/secrets`` and KEDA's adapter dials the operator by its Service's DNS name; neither
works in a testbed pod unchanged. Beside it, each gets explicit flags instead:

- credentials: a token of its own service account (``kubectl create token``) in a kubeconfig,
  so KEDA runs with the RBAC of its own manifests and Prometheus with read access to pods;
- addresses: every port on 127.0.0.1, chosen free at start;
- KEDA's manifests (``config/minimal``, rendered by ``kubectl kustomize``) are applied except
  its two Deployments. Its metrics apiserver's Service becomes an ``ExternalName`` of
  ``localhost``: the aggregator then proxies the external metrics API to
  ``https://localhost:<the APIService's port>`` (it verifies the certificate as
  ``<service>.<namespace>.svc``), and nothing dials a ClusterIP, which routes nowhere here;
- certificates: one CA and one certificate for the adapter's serving and the mutual-TLS gRPC
  between adapter and operator (what KEDA's cert rotation would make), the CA in the
  APIService's ``caBundle``.

Their PIDs are recorded under ``<run dir>/beside/pids``, apart from the testbed's (a KEDA that
died must not make the testbed look dead); ``popfleet-demo down`` stops them first.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from popfleet_e2e import elastic, observe, scenario, waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError
from popfleet_e2e.scenario import Step
from popfleet_e2e.steps import Story
from popfleet_testbed import controlplane, pki, processes

KEDA_NS = "keda"
KEDA_SA = "keda-operator"  # both KEDA Deployments run as it
ADAPTER_SERVICE = "keda-metrics-apiserver"
APISERVICE = "v1beta1.external.metrics.k8s.io"
SCRAPE_S = 5
TOKEN_DURATION = "24h"  # longer than the demo's traffic bound (8 h)
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Builds:
    """What the act runs: KEDA's ``make keda-bin`` directory (``keda``, ``keda-adapter`` and
    its module's ``config/``) and the ``prometheus`` binary of ``make prometheus-bin``."""

    keda_bin: Path
    prometheus: Path

    def missing(self) -> str:
        """Why the act cannot run here ("" when it can)."""
        if not (self.keda_bin / ".complete").is_file():
            return f"KEDA is not built here ({self.keda_bin}): `make keda-bin`, ~12 min once"
        if not self.prometheus.is_file():
            return f"Prometheus is not built here ({self.prometheus}): `make prometheus-bin`"
        return ""


@dataclass(frozen=True)
class Layout:
    run_dir: Path

    @property
    def root(self) -> Path:
        return self.run_dir / "beside"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def certs(self) -> Path:
        return self.root / "keda-certs"


def stop(run_dir: Path, *, grace_s: float = 10.0) -> list[str]:
    """Stop every recorded process beside the testbed (last started first); their names."""
    stopped = []
    for pid_file in sorted(Layout(run_dir).pids.glob("*.pid"), reverse=True):
        recorded = processes.read_pid_file(pid_file)
        if recorded is not None and processes.alive(recorded):
            processes.stop(recorded, grace_s=grace_s)
            stopped.append(pid_file.stem.split("-", 1)[1])
        pid_file.unlink(missing_ok=True)
    return stopped


def _start(
    layout: Layout, order: int, name: str, argv: Sequence[str], *, env: dict[str, str]
) -> processes.Recorded:
    _, recorded = processes.spawn(
        argv, log_path=layout.logs / f"{name}.log", env=env,
        pid_file=layout.pids / f"{order:02d}-{name}.pid",
    )  # fmt: skip
    return recorded


def _wait_ready(
    layout: Layout, name: str, recorded: processes.Recorded, check: Callable[[], bool],
    what: str,
) -> None:  # fmt: skip
    log = layout.logs / f"{name}.log"

    def ready() -> bool:
        if not processes.alive(recorded):
            raise waits.Fatal(f"{name} exited during start-up:\n{controlplane.log_tail(log)}")
        return check()

    try:
        waits.until(ready, timeout_s=START_TIMEOUT_S, what=what, interval_s=0.5)
    except waits.Timeout as exc:
        raise ScenarioError(f"{exc}\n{name} log tail:\n{controlplane.log_tail(log)}") from None


def _kubeconfig(
    access: ClusterAccess, info: controlplane.Info, path: Path, *, account: str, namespace: str
) -> Path:
    """A kubeconfig with a fresh token of ``namespace/account``."""
    token = access.kubectl(
        "create", "token", account, "-n", namespace, f"--duration={TOKEN_DURATION}"
    ).strip()
    pki.write_kubeconfig(
        path, server_url=info.server_url, ca_pem=(info.layout.pki / "ca.crt").read_bytes(),
        user=f"system:serviceaccount:{namespace}:{account}", token=token,
    )  # fmt: skip
    return path


# --- Prometheus ---------------------------------------------------------------------------


def prometheus_config(*, kubeconfig: Path, namespaces: Sequence[str], release: str,
                      release_namespace: str) -> Obj:  # fmt: skip
    """Prometheus's configuration: the broker pods of ``namespaces`` found through the API,
    one target per role's ``metrics-<role>`` port, labelled as the chart's broker PodMonitor
    labels them under prometheus-operator (``job``, ``namespace``, ``pod``, ``cluster``,
    ``role``), so that the dashboards' and the KEDA example's queries read the same."""
    pod_label = "__meta_kubernetes_pod_label_"
    return {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
        "scrape_configs": [
            {
                "job_name": f"{release_namespace}/{release}-brokers",
                "kubernetes_sd_configs": [
                    {
                        "role": "pod",
                        "kubeconfig_file": str(kubeconfig),
                        "namespaces": {"names": list(namespaces)},
                    }
                ],
                "relabel_configs": [
                    {
                        "source_labels": [f"{pod_label}app_kubernetes_io_name"],
                        "regex": "popfleet-broker",
                        "action": "keep",
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": "metrics-(store|popack|revive|front)",
                        "action": "keep",
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": "metrics-(.+)",
                        "target_label": "role",
                    },
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {
                        "source_labels": [f"{pod_label}popfleet_io_cluster"],
                        "target_label": "cluster",
                    },
                ],
            }
        ],
    }


def start_prometheus(
    access: ClusterAccess, info: controlplane.Info, builds: Builds, *, namespaces: Sequence[str]
) -> str:
    """Prometheus on 127.0.0.1, reading pods as its own service account; its URL."""
    layout = Layout(info.run_dir)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": observe.NAMESPACE}}
    objects = [namespace, *observe.prometheus_rbac(observe.NAMESPACE)]
    access.kubectl("apply", "-f", "-", stdin=json.dumps(observe.as_list(objects)))
    home = layout.root / "prometheus"
    home.mkdir(parents=True, exist_ok=True)
    kubeconfig = _kubeconfig(
        access, info, home / "kubeconfig", account=observe.PROMETHEUS_ACCOUNT,
        namespace=observe.NAMESPACE,
    )  # fmt: skip
    config = prometheus_config(
        kubeconfig=kubeconfig, namespaces=namespaces, release=access.release,
        release_namespace=access.release_namespace,
    )  # fmt: skip
    (home / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    url = f"http://127.0.0.1:{controlplane.free_port()}"
    argv = [
        str(builds.prometheus),
        f"--config.file={home / 'prometheus.yml'}",
        f"--storage.tsdb.path={home / 'data'}",
        "--storage.tsdb.retention.time=1d",
        f"--web.listen-address={url.removeprefix('http://')}",
    ]
    recorded = _start(layout, 10, "prometheus", argv, env={"HOME": str(home)})
    _wait_ready(layout, "prometheus", recorded, lambda: controlplane.http_ok(f"{url}/-/ready"),
                "Prometheus ready")  # fmt: skip
    return url


# --- KEDA ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "ca.crt").write_bytes(self.ca_pem)
        (directory / "tls.crt").write_bytes(self.cert_pem)
        key = directory / "tls.key"
        key.touch(mode=0o600)
        key.write_bytes(self.key_pem)


def keda_names(namespace: str = KEDA_NS) -> list[str]:
    """The DNS names KEDA's certificate must carry: the aggregator verifies the adapter as
    ``<service>.<namespace>.svc``; the adapter's gRPC client checks the operator's address."""
    return [
        f"{ADAPTER_SERVICE}.{namespace}.svc",
        f"keda-operator.{namespace}.svc",
        f"keda-operator.{namespace}.svc.cluster.local",
        "localhost",
    ]


def certificates(*, now: datetime.datetime) -> Certificates:
    """A CA and one certificate (serving and client, for the mutual-TLS gRPC) for KEDA, made
    as the testbed makes its own (``pki``)."""
    ca = pki.new_ca(now)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in keda_names()]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    key, cert = pki.leaf(
        ca, now=now, subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "keda")]),
        usages=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], sans=sans,
    )  # fmt: skip
    return Certificates(ca_pem=pki.pem_cert(ca.cert), cert_pem=pki.pem_cert(cert),
                        key_pem=pki.pem_key(key))  # fmt: skip


def keda_objects(rendered: str, *, ca_pem: bytes, adapter_port: int) -> tuple[list[Obj], list[Obj]]:
    """KEDA's ``config/minimal`` as (CRDs, the rest) for KEDA beside the testbed: without its
    two Deployments, its metrics apiserver's Service an ExternalName of ``localhost`` and the
    APIService pointed at ``adapter_port`` with ``ca_pem`` as its CA."""
    crds, rest = [], []
    dropped, service, apiservice = set(), None, None
    for doc in observe.manifests(rendered):
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "CustomResourceDefinition":
            crds.append(doc)
            continue
        if kind == "Deployment":
            dropped.add(name)
            continue
        if kind == "Service" and name == ADAPTER_SERVICE:
            service = doc
            ports = [{"name": "https", "port": adapter_port, "protocol": "TCP"}]
            doc["spec"] = {"type": "ExternalName", "externalName": "localhost", "ports": ports}
        if kind == "APIService" and name == APISERVICE:
            apiservice = doc
            doc["spec"]["service"]["port"] = adapter_port
            doc["spec"]["caBundle"] = base64.b64encode(ca_pem).decode()
            doc["spec"].pop("insecureSkipTLSVerify", None)
        rest.append(doc)
    if not crds or None in (service, apiservice) or dropped != set(elastic.KEDA_DEPLOYMENTS):
        raise ScenarioError(
            f"KEDA's manifests: {len(crds)} CRDs, Deployments {sorted(dropped)}, "
            f"metrics Service {service is not None}, APIService {apiservice is not None}"
        )
    return crds, rest


def start_keda(
    access: ClusterAccess, info: controlplane.Info, builds: Builds
) -> str:  # fmt: skip
    """KEDA's operator and metrics apiserver on 127.0.0.1, its objects applied; a summary."""
    layout = Layout(info.run_dir)
    ports = {name: controlplane.free_port() for name in
             ("adapter", "adapter_metrics", "grpc", "metrics", "probes")}  # fmt: skip
    certs = certificates(now=datetime.datetime.now(datetime.UTC))
    certs.write(layout.certs)
    rendered = access.kubectl("kustomize", str(builds.keda_bin / "config" / "minimal"),
                              timeout_s=120)  # fmt: skip
    observe.apply_with_crds(
        access, *keda_objects(rendered, ca_pem=certs.ca_pem, adapter_port=ports["adapter"])
    )
    home = layout.root / "keda"
    home.mkdir(parents=True, exist_ok=True)
    kubeconfig = _kubeconfig(access, info, home / "kubeconfig", account=KEDA_SA,
                             namespace=KEDA_NS)  # fmt: skip
    env = {
        "HOME": str(home),
        "KUBECONFIG": str(kubeconfig),
        "POD_NAMESPACE": KEDA_NS,
        "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NS,
        "WATCH_NAMESPACE": "",
    }
    certs_dir = str(layout.certs)
    operator = _start(layout, 20, "keda-operator", [
        str(builds.keda_bin / "keda"),
        "--leader-elect=false", "--zap-log-level=info", "--zap-encoder=console",
        "--enable-cert-rotation=false", f"--cert-dir={certs_dir}",
        f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{ports['probes']}",
        f"--metrics-service-bind-address=127.0.0.1:{ports['grpc']}",
    ], env=env)  # fmt: skip
    _wait_ready(layout, "keda-operator", operator,
                lambda: controlplane.http_ok(f"http://127.0.0.1:{ports['probes']}/readyz"),
                "KEDA's operator ready")  # fmt: skip
    adapter = _start(layout, 30, "keda-adapter", [
        str(builds.keda_bin / "keda-adapter"),
        f"--secure-port={ports['adapter']}", "--bind-address=127.0.0.1",
        f"--port={ports['adapter_metrics']}", "--zap-log-level=error",
        f"--cert-dir={certs_dir}", f"--client-ca-file={layout.certs / 'ca.crt'}",
        f"--tls-cert-file={layout.certs / 'tls.crt'}",
        f"--tls-private-key-file={layout.certs / 'tls.key'}",
        f"--metrics-service-address=localhost:{ports['grpc']}",
        f"--lister-kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
    ], env=env)  # fmt: skip

    def served() -> bool:
        got = access.get("apiservice", APISERVICE)
        return any(c["type"] == "Available" and c["status"] == "True"
                   for c in (got.get("status") or {}).get("conditions") or [])  # fmt: skip

    _wait_ready(layout, "keda-adapter", adapter, served, f"APIService {APISERVICE} Available")
    return (
        f"KEDA's operator and metrics apiserver on 127.0.0.1 (ports {ports['grpc']}, "
        f"{ports['adapter']}); {APISERVICE} Available through the aggregator"
    )


# --- the act ------------------------------------------------------------------------------


def act(info: controlplane.Info, builds: Builds) -> tuple[Step, ...]:
    """The elastic act's steps, for a story of its own (its access learns Prometheus's URL)."""

    def prometheus_up(story: Story) -> str:
        access = story.access
        url = start_prometheus(access, info, builds, namespaces=[access.namespace])
        story.access = replace(access, prometheus_url=url)
        built = observe.PrometheusApi(story.access).get("status/buildinfo")
        return f"Prometheus {built['version']} at {url}, scraping the broker pods of " + (
            access.namespace
        )

    return (
        Step("Prometheus (built here) beside the testbed, scraping the brokers", prometheus_up),
        Step("KEDA (built here) beside the testbed: operator, metrics apiserver",
             lambda story: start_keda(story.access, info, builds)),
        *scenario.ELASTIC,
    )  # fmt: skip
