"""Bring a testbed up and down: etcd, kube-apiserver, controller-manager, scheduler, kubelet.

Why: operator, chart and user-story tests need a *real* Kubernetes API (admission, RBAC,
garbage collection, StatefulSet and Job controllers, scheduling) and no Docker exists here.
Everything listens on 127.0.0.1 on free ports; nothing is ever sent to the pod/service
addresses the cluster invents (pods get 127.<b>.x.y with <b> per testbed, services
10.96.0.0/16 which nothing dials).

Run directory layout (``Layout``)::

    <run>/testbed.json        ports, node name, binaries dir (written last: "up" completed)
    <run>/pki/                certificates and kubeconfigs (``pki``); admin.kubeconfig for users
    <run>/pids/NN-<name>.pid  "<pid> <start ticks>" of each component, NN = start order
    <run>/logs/<name>.log     component logs
    <run>/etcd/               etcd data (fsync off: throw-away)
    <run>/state/              the process kubelet's state root (pods, volumes, PV directories)

Steps of ``up`` (each waits with a bounded deadline and fails with the component's log tail):

1. choose free ports, generate the PKI and kubeconfigs;
2. etcd → ``/health``; 3. kube-apiserver → ``/readyz``;
4. kube-controller-manager and kube-scheduler → their ``/healthz``;
5. the process kubelet (``popfleet-testbed kubelet``) → Node Ready;
6. the ``default`` ServiceAccount exists (the controller manager works).

``down`` stops every recorded PID in reverse start order (SIGTERM, then SIGKILL after a
grace period), then any pod process the kubelet left behind, then removes the run directory.

``restart_apiserver`` stops kube-apiserver and starts it again with the argv it ran with
(same port, certificates and etcd, which keeps running and keeps every object): fault tests
take the API away from the operator and its clients and give it back.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import sys
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from popfleet_testbed import binaries, errors, kube, pki, processes, waiting

DEFAULT_NODE = "testbed-node"
START_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Layout:
    run_dir: Path

    @property
    def pki(self) -> Path:
        return self.run_dir / "pki"

    @property
    def pids(self) -> Path:
        return self.run_dir / "pids"

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.run_dir / "etcd"

    @property
    def state(self) -> Path:
        return self.run_dir / "state"

    @property
    def info(self) -> Path:
        return self.run_dir / "testbed.json"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.pki / "admin.kubeconfig"

    def kubeconfig(self, identity: str) -> Path:
        return self.pki / f"{identity}.kubeconfig"


@dataclass(frozen=True, slots=True)
class Info:
    """What ``up`` decided; persisted as ``testbed.json`` so other processes can attach."""

    run_dir: Path
    node_name: str
    bin_dir: Path
    etcd_port: int
    api_port: int
    kubelet_port: int

    @property
    def server_url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def layout(self) -> Layout:
        return Layout(self.run_dir)

    @property
    def binaries(self) -> binaries.Binaries:
        return binaries.Binaries(self.bin_dir)

    def save(self) -> None:
        doc = {
            "node_name": self.node_name,
            "bin_dir": str(self.bin_dir),
            "etcd_port": self.etcd_port,
            "api_port": self.api_port,
            "kubelet_port": self.kubelet_port,
        }
        self.layout.info.write_text(json.dumps(doc, indent=2) + "\n")

    @classmethod
    def load(cls, run_dir: Path) -> Info:
        try:
            doc = json.loads(Layout(run_dir).info.read_text())
        except (OSError, ValueError) as exc:
            raise errors.TestbedError(f"no running testbed in {run_dir}: {exc}") from None
        return cls(
            run_dir=run_dir,
            node_name=str(doc["node_name"]),
            bin_dir=Path(doc["bin_dir"]),
            etcd_port=int(doc["etcd_port"]),
            api_port=int(doc["api_port"]),
            kubelet_port=int(doc["kubelet_port"]),
        )


# ``free_port`` answers a port free *now*; a component binds it a moment later, and another
# process may take it in between: ``up`` then starts again on new ports, this many times.
PORT_ATTEMPTS = 3
PORT_TAKEN = "address already in use"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass(slots=True)
class _Starter:
    layout: Layout
    order: int = 10

    def start(self, name: str, argv: Sequence[str]) -> processes.Recorded:
        pid_file = self.layout.pids / f"{self.order:02d}-{name}.pid"
        self.order += 10
        _, rec = processes.spawn(argv, log_path=self.layout.logs / f"{name}.log", pid_file=pid_file)
        return rec

    def wait(
        self, name: str, rec: processes.Recorded, check: Callable[[], bool], what: str
    ) -> None:
        def probe() -> bool:
            if not processes.alive(rec):
                tail = log_tail(self.layout.logs / f"{name}.log")
                raise errors.TestbedError(f"{name} exited during start-up:\n{tail}")
            return check()

        try:
            waiting.until(probe, timeout_s=START_TIMEOUT_S, what=what, interval_s=0.25)
        except errors.Timeout as exc:
            tail = log_tail(self.layout.logs / f"{name}.log")
            raise errors.TestbedError(f"{exc}\n{name} log tail:\n{tail}") from None


def _https_ok(url: str, layout: Layout, *, client_cert: bool = True, verify: bool = True) -> bool:
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    if not verify:  # kcm/scheduler serve self-signed certificates on 127.0.0.1
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if client_cert:
        ctx.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=3) as resp:
            return int(resp.status) == 200
    except (OSError, ssl.SSLError):
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return int(resp.status) == 200
    except OSError:
        return False


def running(run_dir: Path) -> bool:
    """True when every recorded component of the testbed in ``run_dir`` is alive."""
    pid_files = sorted(Layout(run_dir).pids.glob("*.pid"))
    recs = [processes.read_pid_file(p) for p in pid_files]
    return bool(recs) and all(r is not None and processes.alive(r) for r in recs)


def up(
    run_dir: Path, *, node_name: str = DEFAULT_NODE, bins: binaries.Binaries | None = None
) -> Info:
    """Start a testbed in ``run_dir`` (which must not hold a running one); see the steps."""
    layout = Layout(run_dir)
    if layout.pids.exists() and any(layout.pids.glob("*.pid")):
        if running(run_dir):
            raise errors.TestbedError(f"{run_dir} already has a running testbed")
        down(run_dir)  # leftovers of a testbed that died (reboot, kill -9): clear them
    bins = bins or binaries.locate()
    for attempt in range(1, PORT_ATTEMPTS + 1):
        for d in (layout.pids, layout.logs, layout.etcd_data, layout.state):
            d.mkdir(parents=True, exist_ok=True)
        info = Info(
            run_dir=run_dir,
            node_name=node_name,
            bin_dir=bins.directory,
            etcd_port=free_port(),
            api_port=free_port(),
            kubelet_port=free_port(),
        )
        pki.generate(layout.pki, node_name=node_name, server_url=info.server_url)
        starter = _Starter(layout)
        try:
            _start_all(info, starter)
        except errors.TestbedError as exc:
            down(run_dir, remove=False)
            if PORT_TAKEN not in str(exc) or attempt == PORT_ATTEMPTS:
                raise
            # A port free when chosen was taken before its component bound it (another
            # process got it from the kernel meanwhile): start again on new ports, from an
            # empty etcd (the failed one may have recorded the old peer address).
            shutil.rmtree(layout.etcd_data, ignore_errors=True)
            continue
        except BaseException:
            down(run_dir, remove=False)
            raise
        info.save()
        return info
    raise AssertionError("unreachable: the last attempt returns or raises")


def _start_all(info: Info, starter: _Starter) -> None:
    layout, bins, p = info.layout, info.binaries, info.layout.pki
    peer_port = free_port()
    etcd = starter.start(
        "etcd",
        [
            str(bins.etcd),
            "--name=testbed",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls=http://127.0.0.1:{info.etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{info.etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=testbed=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ],
    )
    starter.wait(
        "etcd", etcd, lambda: http_ok(f"http://127.0.0.1:{info.etcd_port}/health"), "etcd /health"
    )

    apiserver = starter.start(
        "kube-apiserver",
        [
            str(bins.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{info.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={info.api_port}",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            f"--service-cluster-ip-range={pki.SERVICE_RANGE}",
            "--authorization-mode=Node,RBAC",
            # Defaults plus NodeRestriction (as kubeadm): the kubelet may only touch its own
            # Node and the pods bound to it.
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            # The apiserver would publish its loopback address in the `kubernetes` Endpoints,
            # which Endpoints validation rejects; clients get 127.0.0.1 from env instead.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--cert-dir={layout.run_dir / 'apiserver-certs'}",
            # Aggregation layer (requestheader auth) so aggregated APIs can be installed; it
            # also spares every component "missing content for CA bundle" errors.
            f"--requestheader-client-ca-file={p / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={p / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={p / 'front-proxy-client.key'}",
            # `kubectl logs`: the apiserver dials the kubelet's log endpoint on 127.0.0.1.
            f"--kubelet-certificate-authority={p / 'ca.crt'}",
            f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
        ],
    )
    starter.wait(
        "kube-apiserver",
        apiserver,
        lambda: _https_ok(f"{info.server_url}/readyz", layout),
        "kube-apiserver /readyz",
    )

    kcm_port, sched_port = free_port(), free_port()
    kcm_cfg = layout.kubeconfig("kube-controller-manager")
    kcm = starter.start(
        "kube-controller-manager",
        [
            str(bins.kube_controller_manager),
            f"--kubeconfig={kcm_cfg}",
            f"--authentication-kubeconfig={kcm_cfg}",
            f"--authorization-kubeconfig={kcm_cfg}",
            "--bind-address=127.0.0.1",
            f"--secure-port={kcm_port}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={p / 'sa.key'}",
            f"--root-ca-file={p / 'ca.crt'}",
            f"--cluster-signing-cert-file={p / 'ca.crt'}",
            f"--cluster-signing-key-file={p / 'ca.key'}",
            # Fast node-lifecycle reactions keep tests short; the kubelet heartbeats every 10 s.
            "--node-monitor-grace-period=40s",
            "--profiling=false",
        ],
    )
    sched_cfg = layout.kubeconfig("kube-scheduler")
    scheduler = starter.start(
        "kube-scheduler",
        [
            str(bins.kube_scheduler),
            f"--kubeconfig={sched_cfg}",
            f"--authentication-kubeconfig={sched_cfg}",
            f"--authorization-kubeconfig={sched_cfg}",
            "--bind-address=127.0.0.1",
            f"--secure-port={sched_port}",
            "--leader-elect=false",
            "--profiling=false",
        ],
    )
    starter.wait(
        "kube-controller-manager",
        kcm,
        lambda: _https_ok(f"https://127.0.0.1:{kcm_port}/healthz", layout, verify=False),
        "kube-controller-manager /healthz",
    )
    starter.wait(
        "kube-scheduler",
        scheduler,
        lambda: _https_ok(f"https://127.0.0.1:{sched_port}/healthz", layout, verify=False),
        "kube-scheduler /healthz",
    )

    info.save()  # the kubelet reads testbed.json
    kubelet = starter.start(
        "kubelet",
        [sys.executable, "-m", "popfleet_testbed.cli", "kubelet", "--run-dir", str(info.run_dir)],
    )
    admin = kube.Kube(layout.admin_kubeconfig)
    try:
        starter.wait(
            "kubelet",
            kubelet,
            lambda: node_ready(admin, info.node_name),
            f"node {info.node_name} Ready",
        )
        starter.wait(
            "kube-controller-manager",
            kcm,
            lambda: (
                admin.get_or_none("/api/v1/namespaces/default/serviceaccounts/default") is not None
            ),
            "the default ServiceAccount",
        )
    finally:
        admin.close()


def restart_apiserver(info: Info, *, grace_s: float = 10.0) -> None:
    """Stop kube-apiserver, start it again with the same argv and pid file, wait ``/readyz``.

    The argv is read back from ``/proc/<pid>/cmdline`` of the recorded process, so the new one
    listens on the same port with the same flags (nothing here restates ``_start_all``).
    """
    layout = info.layout
    (pid_file,) = layout.pids.glob("*-kube-apiserver.pid")
    rec = processes.read_pid_file(pid_file)
    if rec is None or not processes.alive(rec):
        raise errors.TestbedError(f"kube-apiserver of {info.run_dir} is not running")
    argv = Path(f"/proc/{rec.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    processes.stop(rec, grace_s=grace_s)
    _, new = processes.spawn(argv, log_path=layout.logs / "kube-apiserver.log", pid_file=pid_file)
    _Starter(layout).wait(
        "kube-apiserver",
        new,
        lambda: _https_ok(f"{info.server_url}/readyz", layout),
        "kube-apiserver /readyz after a restart",
    )


def node_ready(admin: kube.Kube, node_name: str) -> bool:
    node = admin.get_or_none(f"/api/v1/nodes/{node_name}")
    if node is None:
        return False
    conditions = node.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def down(run_dir: Path, *, remove: bool = True, grace_s: float = 10.0) -> None:
    """Stop every recorded component (reverse order), then stray pod processes."""
    layout = Layout(run_dir)
    for pid_file in sorted(layout.pids.glob("*.pid"), reverse=True):
        rec = processes.read_pid_file(pid_file)
        if rec is not None:
            processes.stop(rec, grace_s=grace_s)
        pid_file.unlink(missing_ok=True)
    # The kubelet stops its pods on SIGTERM; this catches what a SIGKILLed kubelet left.
    for pid_file in layout.state.glob("pods/*/containers/*.pid"):
        rec = processes.read_pid_file(pid_file)
        if rec is not None:
            processes.stop(rec, grace_s=2.0)
    if remove:
        shutil.rmtree(run_dir, ignore_errors=True)
