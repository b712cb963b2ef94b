"""What replication costs, and how long a failover takes (issue 18).

On the testbed's kube-apiserver (the broker sets' Leases; ``make testbed-bin`` binaries),
with the compiled load generator (:mod:`bench.peers.loadgen`, 1 KiB messages, batches of
32) against the leader's popfront:

1. **Throughput and CPU** of three shapes, each a broker pod as
   :func:`bench.peers.servers.start_popfleet_roles` runs it behind popfront:
   ``replicas-1`` (no replication: today's pod), ``sync-2`` (two pods, SYNC,
   minInSyncReplicas 2: a write is answered once both hold it) and ``async-2`` (two pods,
   ASYNC: answered after the leader's write). Phases: produce ``--messages``, then pop+ack
   that backlog with 1 and with 4 consumers. CPU is the leader pod's and the whole set's
   (every process of every pod), per message; the 1-minute load average around each phase.
2. **Failover time**: three store replicas (SYNC, minInSyncReplicas 2, the Lease timings
   below), the leader's process SIGKILLed ``--kills`` times; each time, the seconds from the
   kill until another replica takes a SYNC write through its store socket, then the killed
   one is started again and the next kill waits until it is back in the in-sync set.
   Every acknowledged write is checked on the last leader at the end (must be 0 lost).

Shapes run in an order that rotates between runs; each starts afresh on a temp dir and is
stopped by PID. ``bench/results/replication.json`` keeps every run and the medians.
Run: ``python -m bench.replication [--runs 3] [--kills 20]``. Not a test: nothing asserts
a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.peers import cpu, loadgen, procs, servers, summary, workload
from popbroker.replicator.leases import IN_SYNC_ANNOTATION, TERM_ANNOTATION
from popbroker.store.api import MessageToAppend
from popbroker.store.errors import NotEnoughReplicas, NotLeader, StoreClosed, StoreError
from popbroker.store.wire.client import RemoteStore
from popfleet_testbed import binaries, cluster, controlplane, kube
from tools import gobuild

SHAPES = ("replicas-1", "sync-2", "async-2")
TOPICS = ("warmup", "bench")
GROUPS = ("gwarm", "g1", "g4")
LEASE = "broker-0"
# the Lease timings of a replica here (and the operator's defaults): a candidate takes over
# after lease_ms of silence by its own clock, checked every retry_ms
TIMINGS = {"lease_ms": 6_000, "renew_deadline_ms": 4_000, "retry_ms": 1_000, "max_lag_ms": 3_000}
WAIT_S = 120.0


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.replication")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--warmup-messages", type=int, default=5_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--name", default="replication", help="results file (no .json)")
    return parser.parse_args(argv)


def _replica_flags(
    name: str, *, peers: str, namespace: str, tb: cluster.Cluster, token: Path, mode: str,
    min_in_sync: int, leader_file: Path,
) -> list[str]:  # fmt: skip
    return [
        "--replica-name", name, "--replica-peers", peers, "--lease-namespace", namespace,
        "--lease-name", LEASE, "--replication-token-file", str(token),
        "--kubeconfig", str(tb.kubeconfig), "--replication-mode", mode,
        "--min-in-sync-replicas", str(min_in_sync),
        "--lease-ms", str(TIMINGS["lease_ms"]),
        "--renew-deadline-ms", str(TIMINGS["renew_deadline_ms"]),
        "--retry-ms", str(TIMINGS["retry_ms"]), "--max-lag-ms", str(TIMINGS["max_lag_ms"]),
        "--leader-file", str(leader_file),
    ]  # fmt: skip


def _lease(tb: cluster.Cluster, namespace: str) -> dict[str, Any] | None:
    path = kube.ns_path(namespace, "leases", LEASE, group="coordination.k8s.io/v1")
    return tb.admin.get_or_none(path)


def _wait_in_sync(tb: cluster.Cluster, namespace: str, members: set[str]) -> None:
    """Until the Lease records ``members`` as the in-sync set (bounded)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        lease = _lease(tb, namespace)
        annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
        if set(filter(None, annotations.get(IN_SYNC_ANNOTATION, "").split(","))) == members:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"in-sync set never became {sorted(members)}: {annotations}")
        time.sleep(0.2)  # bounded poll of the Lease


class Shape:
    """One shape running: its pods (each a ``ServerSet`` with popfront), the leader's endpoint."""

    def __init__(self, pods: dict[str, procs.ServerSet], leader: str) -> None:
        self.pods = pods
        self.leader = leader

    @property
    def endpoint(self) -> str:
        return self.pods[self.leader].endpoint

    def root_pids(self, *, leader_only: bool) -> list[int]:
        chosen = [self.pods[self.leader]] if leader_only else list(self.pods.values())
        return [pid for pod in chosen for pid in pod.root_pids()]

    def stop(self) -> None:
        for pod in self.pods.values():
            pod.stop()


def start_shape(shape: str, work_dir: Path, *, tb: cluster.Cluster, namespace: str) -> Shape:
    topics = [servers.PopfleetTopic(t) for t in TOPICS]
    front = gobuild.ensure_built(gobuild.FRONT)
    names = ["a"] if shape == "replicas-1" else ["a", "b"]
    token = work_dir / "token"
    work_dir.mkdir(parents=True, exist_ok=True)
    token.write_text("bench-secret\n")
    peers = ",".join(f"{n}={procs.HOST}:{procs.free_port()}" for n in names)
    pods: dict[str, procs.ServerSet] = {}
    try:
        for name in names:
            pod_dir = work_dir / name
            store_args = (
                []
                if shape == "replicas-1"
                else _replica_flags(
                    name,
                    peers=peers,
                    namespace=namespace,
                    tb=tb,
                    token=token,
                    mode="SYNC" if shape == "sync-2" else "ASYNC",
                    min_in_sync=2 if shape == "sync-2" else 1,
                    leader_file=pod_dir / "leading",
                )
            )
            port = procs.free_port()
            roles = servers.start_popfleet_roles(
                pod_dir, topics=topics, groups=GROUPS, front_port=port, store_args=store_args
            )
            popfront = servers.start_front(front, pod_dir, port=port)
            pods[name] = procs.ServerSet(
                name=f"{shape}-{name}", endpoint=popfront.endpoint,
                processes=[*roles.processes, popfront],
            )  # fmt: skip
        if shape == "replicas-1":
            return Shape(pods, "a")
        _wait_in_sync(tb, namespace, set(names))
        leader = next(n for n in names if (work_dir / n / "leading").exists())
        return Shape(pods, leader)
    except BaseException:
        for pod in pods.values():
            pod.stop()
        raise


def measure(shape: Shape, binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    def phase(name: str, **fields: Any) -> dict[str, Any]:
        spec = loadgen.Phase(system="popfleet", endpoint=shape.endpoint, **fields)
        before = {
            k: cpu.read(shape.root_pids(leader_only=k == "leader")) for k in ("leader", "set")
        }
        figures = loadgen.run_phase(binary, spec)
        count = int(figures.get("messages") or 0)
        figures["cpu"] = {
            k: cpu.window(before[k], cpu.read(shape.root_pids(leader_only=k == "leader")), count)
            for k in ("leader", "set")
        }
        leader, whole = figures["cpu"]["leader"], figures["cpu"]["set"]
        print(
            f"   {name:<12} {figures.get('msgs_per_s', 0):>9.0f} msgs/s  cpu leader "
            f"{leader['cpu_us_per_msg']} set {whole['cpu_us_per_msg']} us/msg  "
            f"load {whole['load_1m_start']:.1f}",
            flush=True,
        )
        return figures

    for attempt in range(15):  # the endpoint answers and the topics resolve (bounded)
        try:
            phase("ready", phase="ready", topics=TOPICS)
            break
        except RuntimeError:
            if attempt == 14:
                raise
            time.sleep(2)
    warm = {"topic": "warmup", "count": args.warmup_messages}
    phase("warm-up", phase="produce", **warm)
    phase("warm-up pop", phase="popack", group="gwarm", **warm)
    out = {"produce": phase("produce", phase="produce", topic="bench", count=args.messages)}
    backlog = int(out["produce"]["messages"])
    for consumers, group in ((1, "g1"), (4, "g4")):
        out[f"pop_ack_{consumers}"] = phase(
            f"pop+ack {consumers}", phase="popack", topic="bench", group=group, count=backlog,
            consumers=consumers,
        )  # fmt: skip
    return out


# --- failover ---------------------------------------------------------------------------------


def _message(i: int) -> list[MessageToAppend]:
    return [
        MessageToAppend(
            topic="bench", queue_id=i % 4, body=b"m%d" % i, properties={"UNIQ_KEY": str(i)}
        )
    ]


class Replicas:
    """Three store replicas (SYNC, minInSyncReplicas 2), each a process on its socket."""

    def __init__(self, work_dir: Path, *, tb: cluster.Cluster, namespace: str) -> None:
        self.work_dir = work_dir
        self.tb, self.namespace = tb, namespace
        token = work_dir / "token"
        work_dir.mkdir(parents=True, exist_ok=True)
        token.write_text("bench-secret\n")
        peers = ",".join(f"{n}={procs.HOST}:{procs.free_port()}" for n in "abc")
        self.argv: dict[str, list[str]] = {}
        for name in "abc":
            data_dir = work_dir / name / "data"
            asyncio.run(servers._seed_popfleet(data_dir, [servers.PopfleetTopic("bench")], []))
            self.argv[name] = [
                *servers.popbroker_argv(), "store", "--data-dir", str(data_dir),
                "--socket", str(self.socket(name)),
                *_replica_flags(
                    name, peers=peers, namespace=namespace, tb=tb, token=token, mode="SYNC",
                    min_in_sync=2, leader_file=work_dir / name / "leading",
                ),
            ]  # fmt: skip
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for name in "abc":
            self.start(name)

    def socket(self, name: str) -> Path:
        return self.work_dir / f"{name}.sock"

    def start(self, name: str) -> None:
        self.socket(name).unlink(missing_ok=True)
        with (self.work_dir / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                self.argv[name], stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
            )  # fmt: skip

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


async def _connect(replicas: Replicas, name: str) -> RemoteStore:
    deadline = time.monotonic() + WAIT_S
    while not replicas.socket(name).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} never served")
        await asyncio.sleep(0.05)
    store = RemoteStore.connect(f"unix:{replicas.socket(name)}")
    await store.wait_ready(timeout_s=WAIT_S)
    return store


async def _write(stores: dict[str, RemoteStore], i: int) -> str:
    """Write message ``i`` to whichever replica takes it (bounded); its name."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for name, store in stores.items():
            try:
                await store.append(_message(i))
            except (NotLeader, NotEnoughReplicas, StoreClosed):
                continue
            return name
        await asyncio.sleep(0.02)  # a client's retry pause (the figure's resolution)
    raise TimeoutError(f"no replica took write {i} within {WAIT_S}s")


async def failovers(replicas: Replicas, kills: int) -> dict[str, Any]:
    stores = {n: await _connect(replicas, n) for n in "abc"}
    acknowledged: set[str] = set()
    samples: list[float] = []
    loads: list[float] = []
    i = 0
    try:
        leader = await _write(stores, i)
        acknowledged.add(str(i))
        for kill in range(kills):
            await asyncio.to_thread(_wait_in_sync, replicas.tb, replicas.namespace, set("abc"))
            for _ in range(50):  # writes in the term before the kill
                i += 1
                leader = await _write(stores, i)
                acknowledged.add(str(i))
            loads.append(os.getloadavg()[0])
            replicas.kill(leader)
            killed_at = time.monotonic()
            await stores.pop(leader).close()
            i += 1
            new = await _write(stores, i)
            samples.append(time.monotonic() - killed_at)
            acknowledged.add(str(i))
            print(f"   kill {kill + 1:>2}: {leader} killed, {new} leads {samples[-1]:.2f}s later")
            replicas.start(leader)
            stores[leader] = await _connect(replicas, leader)
            leader = new
        lost = acknowledged - await _keys(stores[leader], i)
    finally:
        for store in stores.values():
            await store.close()
    lease = _lease(replicas.tb, replicas.namespace) or {}
    return {
        "kills": kills,
        "failover_s": [round(s, 3) for s in samples],
        "failover_p50_s": round(workload.percentile(samples, 50), 3),
        "failover_p99_s": round(workload.percentile(samples, 99), 3),
        "failover_max_s": round(max(samples), 3),
        "acknowledged_writes": len(acknowledged),
        "acknowledged_lost": len(lost),
        "final_term": int(
            ((lease.get("metadata") or {}).get("annotations") or {}).get(TERM_ANNOTATION, 0)
        ),
        "load_1m_at_kills": [round(x, 2) for x in loads],
        "timings_ms": TIMINGS,
    }


async def _keys(store: RemoteStore, upto: int) -> set[str]:
    found: set[str] = set()
    for queue_id in range(4):
        offset = 0
        while True:
            try:
                read = await store.read("bench", queue_id, offset, max_count=256)
            except StoreError:
                break
            if not read.messages:
                break
            found |= {m.properties["UNIQ_KEY"] for m in read.messages}
            offset = read.messages[-1].queue_offset + 1
    return found


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    if set(shapes) - set(SHAPES) or args.runs < 1:
        raise SystemExit(f"shapes from {SHAPES}, runs >= 1")
    binary = loadgen.ensure_built()
    run_dir = Path(tempfile.mkdtemp(prefix="popfleet-bench-replication-"))
    tb = cluster.Cluster(controlplane.up(run_dir, bins=binaries.locate()))
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in shapes}
    try:
        for run in range(args.runs):
            for shape in summary.rotation(shapes, run):
                namespace = tb.new_namespace()
                print(f"run {run + 1}/{args.runs}: {shape}", flush=True)
                with tempfile.TemporaryDirectory(prefix=f"replication-{shape}-") as tmp:
                    started = start_shape(shape, Path(tmp), tb=tb, namespace=namespace)
                    try:
                        figures = measure(started, binary, args)
                    finally:
                        started.stop()
                figures["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
                runs[shape].append(figures)
                tb.delete_namespace(namespace)
        failover: dict[str, Any] = {}
        if args.kills > 0:
            print(f"failover: {args.kills} kills of the leader", flush=True)
            namespace = tb.new_namespace()
            with tempfile.TemporaryDirectory(prefix="replication-failover-") as tmp:
                replicas = Replicas(Path(tmp), tb=tb, namespace=namespace)
                try:
                    failover = asyncio.run(failovers(replicas, args.kills))
                finally:
                    replicas.stop()
    finally:
        tb.close()
        controlplane.down(run_dir, remove=True)
    medians = {
        shape: {
            phase: {
                "msgs_per_s": common.median([r[phase]["msgs_per_s"] for r in per]),
                "leader_cpu_us_per_msg": common.median(
                    [r[phase]["cpu"]["leader"]["cpu_us_per_msg"] for r in per]
                ),
                "set_cpu_us_per_msg": common.median(
                    [r[phase]["cpu"]["set"]["cpu_us_per_msg"] for r in per]
                ),
            }
            for phase in ("produce", "pop_ack_1", "pop_ack_4")
        }
        for shape, per in runs.items()
    }
    ratios = {
        shape: {
            phase: round(
                medians[shape][phase]["msgs_per_s"] / medians["replicas-1"][phase]["msgs_per_s"], 3
            )
            for phase in medians[shape]
        }
        for shape in medians
        if "replicas-1" in medians and shape != "replicas-1"
    }
    path = common.write(
        args.name,
        {"machine": common.machine(), "runs": runs, "medians": medians,
         "throughput_vs_replicas_1": ratios, "failover": failover, "messages": args.messages},
    )  # fmt: skip
    print(f"medians: {medians}\nratios: {ratios}\nfailover: {failover}\nwritten {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
