"""The process kubelet: one Node whose pods' containers are local processes.

Why: the operator's StatefulSets, the chart's Deployment and the audit Jobs must really run
(the user story needs brokers answering on their pod IPs) and no container runtime exists.
This program plays kubelet for the pods bound to its Node, using the ``system:node:<name>``
identity, so the Node authorizer and NodeRestriction confine it as they confine a kubelet.

Loop (every ``TICK_S``, single-threaded; probes run on a small thread pool):

1. heartbeat (``node``): renew the Lease every 10 s, patch the Node's status every 30 s;
2. provisioner step (PVs for pending claims, see ``provisioner``);
3. list pods with ``spec.nodeName=<node>`` and sync each (``_sync``):
   a. deletion requested → SIGTERM every container, SIGKILL after the grace period, then
      delete the pod object with grace 0 (uid precondition) and clean up;
   b. new → allocate a loopback pod IP (127.<b>.1.2 upwards, <b> per testbed), materialise volumes;
   c. start/restart containers (``runtime``), run probes, patch status when it changed;
4. pods that vanished from the list (force-deleted) are killed at once.

``logserver`` answers the apiserver's ``/containerLogs`` calls, so ``kubectl logs`` works.

On SIGTERM the kubelet stops every container (SIGTERM, SIGKILL after 10 s) and exits.

Pod IPs are loopback addresses so that many pods can bind the same port on one host and
clients (tests, the operator) can dial them; nothing ever dials anything else.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from popfleet_testbed import (
    controlplane,
    errors,
    images,
    kube,
    logserver,
    node,
    pki,
    podenv,
    podstatus,
    processes,
    provisioner,
    runtime,
    volumes,
)

Obj = dict[str, Any]

TICK_S = 0.5
REFRESH_VOLUMES_S = 10.0
SHUTDOWN_GRACE_S = 10.0


def _log(message: str) -> None:
    print(f"{runtime.now_rfc3339()} kubelet: {message}", file=sys.stderr, flush=True)


class ApiSources:
    """``volumes.Sources`` over the node's own API identity."""

    def __init__(self, client: kube.Kube) -> None:
        self._kube = client

    def configmap(self, namespace: str, name: str) -> Obj | None:
        return self._kube.get_or_none(kube.ns_path(namespace, "configmaps", name))

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self._kube.get_or_none(kube.ns_path(namespace, "secrets", name))

    def pvc(self, namespace: str, name: str) -> Obj | None:
        return self._kube.get_or_none(kube.ns_path(namespace, "persistentvolumeclaims", name))

    def pv(self, name: str) -> Obj | None:
        return self._kube.get_or_none(f"/api/v1/persistentvolumes/{name}")

    def token(
        self, pod: Obj, *, service_account: str, audience: str | None, expiration_s: int
    ) -> volumes.Token:
        meta = pod["metadata"]
        spec: Obj = {
            "expirationSeconds": expiration_s,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        }
        if audience:
            spec["audiences"] = [audience]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = kube.ns_path(meta["namespace"], "serviceaccounts", f"{service_account}/token")
        answer = self._kube.create(path, body)
        issued = time.time()
        granted = int(answer.get("spec", {}).get("expirationSeconds", expiration_s))
        return volumes.Token(answer["status"]["token"], issued, issued + granted)


class Kubelet:
    def __init__(self, info: controlplane.Info) -> None:
        self.info = info
        layout = info.layout
        self.node = info.node_name
        self.state = layout.state
        self.api = kube.Kube(layout.kubeconfig("node"))
        self.sources = ApiSources(self.api)
        self.provisioner = provisioner.Provisioner(
            kube.Kube(layout.kubeconfig("provisioner")), self.state / "volumes"
        )
        self.ca_pem = (layout.pki / "ca.crt").read_bytes()
        self.pods: dict[str, runtime.PodRun] = {}
        # Pod IPs live in 127.<b>.0.0/16 with <b> derived from this testbed's state directory, so
        # two testbeds on one host (a developer's and a CI run) never hand out the same address.
        self.ip_second_octet = 16 + zlib.crc32(str(self.state).encode()) % 239
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="probe")
        self.stopping = threading.Event()
        self.images = images.table()
        self.node_agent = node.NodeAgent(self.api, name=self.node, kubelet_port=info.kubelet_port)

    # -- main loop --------------------------------------------------------------------------

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        logs = logserver.serve(
            self.state, pki_dir=self.info.layout.pki, port=self.info.kubelet_port
        )
        self.node_agent.register()
        try:
            while not self.stopping.is_set():
                try:
                    self.tick()
                # The loop is the edge: log and retry next tick, never die (a dead kubelet
                # turns every later test failure into a mystery).
                except errors.TestbedError as exc:
                    _log(f"tick failed, retrying: {exc}")
                except OSError as exc:  # apiserver connection trouble
                    _log(f"tick failed, retrying: {exc!r}")
                self.stopping.wait(TICK_S)
        finally:
            logs.shutdown()
            self.shutdown()

    def tick(self) -> None:
        self.node_agent.heartbeat()
        self.provisioner.step()
        listed = self.api.items("/api/v1/pods", {"fieldSelector": f"spec.nodeName={self.node}"})
        seen = set()
        for pod in listed:
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            try:
                self._sync(pod)
            except errors.TestbedError as exc:  # one bad pod must not stall the others
                meta = pod["metadata"]
                _log(f"sync of {meta['namespace']}/{meta['name']} failed: {exc}")
        for uid, pr in list(self.pods.items()):
            if uid not in seen:
                self._terminate(pr, grace_s=0.0)
                if not pr.any_running:
                    self._cleanup(pr)
                    del self.pods[uid]

    def shutdown(self) -> None:
        now = time.monotonic()
        for pr in self.pods.values():
            for cr in pr.all_runs:
                cr.kill(grace_s=SHUTDOWN_GRACE_S, now_mono=now)
        deadline = now + SHUTDOWN_GRACE_S + 5
        while any(pr.any_running for pr in self.pods.values()) and time.monotonic() < deadline:
            for pr in self.pods.values():
                for cr in pr.all_runs:
                    cr.reap(restart_policy="Never", now_mono=time.monotonic())
            time.sleep(0.05)
        self.pool.shutdown(wait=False, cancel_futures=True)

    # -- pods -------------------------------------------------------------------------------

    def _allocate_ip(self) -> str:
        used = {pr.ip for pr in self.pods.values()}
        for third in range(1, 255):
            for fourth in range(2, 255):
                ip = f"127.{self.ip_second_octet}.{third}.{fourth}"
                if ip not in used:
                    return ip
        raise errors.TestbedError("out of loopback pod IPs")

    def _new_run(self, pod: Obj) -> runtime.PodRun:
        meta = pod["metadata"]
        pod_dir = self.state / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
        pod_dir.mkdir(parents=True, exist_ok=True)

        def run(spec: Obj, init: bool) -> runtime.ContainerRun:
            return runtime.ContainerRun(spec=spec, init=init, pod_dir=pod_dir)

        return runtime.PodRun(
            uid=meta["uid"],
            namespace=meta["namespace"],
            name=meta["name"],
            pod=pod,
            ip=self._allocate_ip(),
            pod_dir=pod_dir,
            vols=volumes.PodVolumes(pod_dir=pod_dir, state_root=self.state),
            init=[run(c, True) for c in pod["spec"].get("initContainers") or []],
            containers=[run(c, False) for c in pod["spec"].get("containers") or []],
        )

    def _sync(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        pr = self.pods.get(uid)
        if pr is None:
            if pod["metadata"].get("deletionTimestamp"):
                self._finalize_delete(pod)  # nothing of it runs here
                return
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                return  # finished before this kubelet started: nothing to run
            pr = self._new_run(pod)
            self.pods[uid] = pr
        pr.pod = pod
        now = time.monotonic()
        if pod["metadata"].get("deletionTimestamp"):
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            self._terminate(pr, grace_s=float(grace if grace is not None else pr.grace_s))
            if not pr.any_running and not pr.deleted:
                self._post_status(pr)
                self._finalize_delete(pod)
                pr.deleted = True
                self._cleanup(pr)
            return
        self._prepare(pr, now)
        if pr.prepared:
            self._run_containers(pr, now)
        self._post_status(pr)

    def _prepare(self, pr: runtime.PodRun, now: float) -> None:
        if pr.prepared and now - pr.last_refresh_mono < REFRESH_VOLUMES_S:
            return
        try:
            volumes.materialise(pr.pod, pr.vols, sources=self.sources, pod_ip=pr.ip)
        except errors.TestbedError as exc:
            if not exc.retriable and not isinstance(exc, errors.KubeError):
                raise
            if not pr.prepared:
                pr.waiting_message = str(exc)
            return
        pr.last_refresh_mono = now
        if not pr.prepared:
            pr.prepared, pr.waiting_message = True, ""
        self._write_sa_kubeconfig(pr)

    def _sa_dir(self, pr: runtime.PodRun) -> Path | None:
        for c in pr.pod["spec"].get("containers") or []:
            for vm in c.get("volumeMounts") or []:
                if vm["mountPath"].rstrip("/") == volumes.SERVICEACCOUNT_PATH:
                    return pr.vols.dirs.get(vm["name"])
        return None

    def _write_sa_kubeconfig(self, pr: runtime.PodRun) -> None:
        sa_dir = self._sa_dir(pr)
        if sa_dir is None or not (sa_dir / "token").is_file():
            return
        pki.write_kubeconfig(
            pr.pod_dir / "serviceaccount.kubeconfig",
            server_url=self.info.server_url,
            ca_pem=self.ca_pem,
            user=f"system:serviceaccount:{pr.namespace}",
            token=(sa_dir / "token").read_text(),
            token_file=sa_dir / "token",
            namespace=pr.namespace,
        )

    def _base_env(self, pr: runtime.PodRun) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        env = {
            "PATH": venv_bin + os.pathsep + os.environ.get("PATH", os.defpath),
            "HOME": str(pr.pod_dir / "root"),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "POPFLEET_TESTBED": "1",
            "POPFLEET_TESTBED_ROOT": str(pr.pod_dir / "root"),
        }
        sa_dir = self._sa_dir(pr)
        if sa_dir is not None:
            env["POPFLEET_SERVICEACCOUNT_DIR"] = str(sa_dir)
            env["KUBECONFIG"] = str(pr.pod_dir / "serviceaccount.kubeconfig")
        return env

    def _start(self, pr: runtime.PodRun, cr: runtime.ContainerRun, now: float) -> None:
        try:
            base = self._base_env(pr)
            env = podenv.container_env(
                pr.pod,
                cr.spec,
                sources=self.sources,
                pod_ip=pr.ip,
                api_port=self.info.api_port,
                base=base,
            )
            mounts = volumes.mounts(cr.spec, pr.vols)
            root = pr.pod_dir / "root"
            root.mkdir(parents=True, exist_ok=True)
            volumes.link_mounts(root, mounts)
            rewrite = volumes.rewriter(mounts)
            # The testbed's own variables (KUBECONFIG, HOME, ...) are host paths already: a run
            # directory under /tmp must not be rewritten into a pod's /tmp emptyDir.
            env = {k: v if base.get(k) == v else rewrite(v) for k, v in env.items()}
            # Rewrite only the words of the pod spec: the image table's entry point is a host
            # path (e.g. <repo>/.venv/bin/popbroker) that may itself lie under a mount path
            # such as /tmp when the repository is checked out there.
            command = cr.spec.get("command")
            args = cr.spec.get("args")
            argv = images.argv(
                cr.spec.get("image", ""),
                command=[rewrite(w) for w in command] if command else command,
                args=[rewrite(w) for w in args] if args else args,
                env=env,
                images=self.images,
            )
            cwd = Path(rewrite(cr.spec["workingDir"])) if cr.spec.get("workingDir") else root
            cwd.mkdir(parents=True, exist_ok=True)
            cr.rewrite = rewrite
            cr.start(argv, env=env, cwd=cwd, now_mono=now)
        except errors.TestbedError as exc:
            reason = "CreateContainerConfigError" if exc.retriable else "ImageNotInTable"
            cr.state = {"waiting": {"reason": reason, "message": str(exc)}}
            cr.next_start_mono = now + 1.0
        except OSError as exc:  # e.g. the entry point is not installed
            cr.state = {"waiting": {"reason": "RunContainerError", "message": str(exc)}}
            cr.next_start_mono = now + 2.0

    def _run_containers(self, pr: runtime.PodRun, now: float) -> None:
        for cr in pr.all_runs:
            cr.reap(restart_policy=pr.restart_policy, now_mono=now)
        if pr.init_failed:
            return
        for cr in pr.init:
            if cr.succeeded:
                continue
            if not cr.running and not cr.done and now >= cr.next_start_mono:
                self._start(pr, cr, now)
            return  # one init container at a time
        for cr in pr.containers:
            if not cr.running and not cr.done and now >= cr.next_start_mono:
                self._start(pr, cr, now)
            cr.run_probes(self.pool, pod_ip=pr.ip, now_mono=now, grace_s=min(pr.grace_s, 10.0))

    def _terminate(self, pr: runtime.PodRun, *, grace_s: float) -> None:
        now = time.monotonic()
        if not pr.terminating:
            pr.terminating = True
            pr.kill_deadline_mono = now + grace_s
            for cr in pr.all_runs:
                cr.kill(grace_s=grace_s, now_mono=now)
        for cr in pr.all_runs:
            cr.reap(restart_policy="Never", now_mono=now)

    def _post_status(self, pr: runtime.PodRun) -> None:
        status = podstatus.pod_status(pr)
        if pr.last_status is not None and podstatus.comparable(status) == pr.last_status:
            return
        path = kube.ns_path(pr.namespace, "pods", f"{pr.name}/status")
        try:
            # metadata.uid acts as a precondition: never patch a same-named successor pod.
            body = {"metadata": {"uid": pr.uid}, "status": status}
            self.api.patch(path, body, content_type=kube.MERGE)
        except errors.KubeError as exc:
            if exc.status in (404, 409):
                return
            raise
        pr.last_status = podstatus.comparable(status)

    def _finalize_delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        try:
            self.api.delete(kube.ns_path(meta["namespace"], "pods", meta["name"]), body)
        except errors.KubeError as exc:
            if exc.status != 409:  # 409: uid precondition failed, a new pod took the name
                raise

    def _cleanup(self, pr: runtime.PodRun) -> None:
        """Remove emptyDir/config volumes and the root view; logs stay for post-mortems."""
        for sub in ("volumes", "root", "containers"):
            target = pr.pod_dir / sub
            if target.exists():
                shutil.rmtree(target, ignore_errors=True)
        for cr in pr.all_runs:
            if cr.rec is not None:
                processes.signal_group(cr.rec, signal.SIGKILL)


def main(run_dir: Path) -> None:
    info = controlplane.Info.load(run_dir) if (run_dir / "testbed.json").exists() else None
    if info is None:
        raise errors.TestbedError(f"{run_dir}/testbed.json missing")
    Kubelet(info).run()
