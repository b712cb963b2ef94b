"""A fleet of Topics and ConsumerGroups for the operator's fault tests, and what they check.

A fleet is ``count`` Topics ``<prefix>-t<i>`` and as many ConsumerGroups ``<prefix>-g<i>``
(group i reads topic i), labelled ``faults.popfleet.io/fleet=<prefix>`` so that one list call
reads a fleet and one delete removes it. :func:`stragglers` is the single definition of
"converged and nothing stale" that every fault test waits for; :class:`Recorder` keeps every
state a fleet's objects pass through (a watch), for claims of the form "never reported ...".
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from popfleet_api import errors as admin_errors
from popfleet_api.client import BrokerAdmin
from popfleet_testbed import cluster, errors, waiting
from tests.integration.operator import story

Obj = dict[str, Any]
LABEL = "faults.popfleet.io/fleet"
DOMAIN = {"topics": "TopicSynced", "consumergroups": "ModeApplied"}
OPERATOR_NS = "popfleet-system"
OPERATOR_SELECTOR = "app.kubernetes.io/name=popfleet-operator"


@dataclass(frozen=True, slots=True)
class Fleet:
    """Names and manifests of one fleet on one BrokerCluster of ``brokers`` pods."""

    prefix: str
    cluster: str
    brokers: int
    count: int
    first: int = 0

    def topic(self, i: int) -> str:
        return f"{self.prefix}-t{i}"

    def group(self, i: int) -> str:
        return f"{self.prefix}-g{i}"

    @property
    def indexes(self) -> range:
        return range(self.first, self.first + self.count)

    @property
    def names(self) -> list[tuple[str, str]]:
        """(plural, name) of every object of the fleet."""
        return [("topics", self.topic(i)) for i in self.indexes] + [
            ("consumergroups", self.group(i)) for i in self.indexes
        ]

    @property
    def expected_brokers(self) -> list[str]:
        return [f"{self.cluster}-{b}" for b in range(self.brokers)]

    def manifests(self) -> list[Obj]:
        objects = [story.topic_cr(self.topic(i), self.cluster) for i in self.indexes]
        objects += [
            story.group_cr(self.group(i), self.cluster, self.topic(i)) for i in self.indexes
        ]
        for obj in objects:
            obj["metadata"]["labels"] = {LABEL: self.prefix}
        return objects


def listing(tb: cluster.Cluster, namespace: str, prefix: str) -> dict[tuple[str, str], Obj]:
    """Every object of the fleet ``prefix`` in ``namespace``, by (plural, name)."""
    found: dict[tuple[str, str], Obj] = {}
    for plural in DOMAIN:
        for obj in tb.admin.items(
            story.path(namespace, plural), {"labelSelector": f"{LABEL}={prefix}"}
        ):
            found[(plural, obj["metadata"]["name"])] = obj
    return found


def why_not_converged(plural: str, obj: Obj, expected_brokers: Sequence[str]) -> str | None:
    """Why ``obj`` is not converged, or None when it is.

    Converged and nothing stale: the status and each of the domain condition, Ready,
    Reconciling and Degraded speak of the current generation, with the domain condition and
    Ready True, Reconciling and Degraded False; every expected broker listed as synced with no
    error (and, for a group, holding the spec's consume mode).
    """
    generation = obj["metadata"]["generation"]
    status = obj.get("status") or {}
    if status.get("observedGeneration") != generation:
        return f"status.observedGeneration {status.get('observedGeneration')} != {generation}"
    by_type = {c["type"]: c for c in status.get("conditions") or []}
    wanted = {DOMAIN[plural]: "True", "Ready": "True", "Reconciling": "False", "Degraded": "False"}
    for type_, want in wanted.items():
        cond = by_type.get(type_)
        if cond is None:
            return f"no {type_} condition"
        if cond["status"] != want or cond.get("observedGeneration") != generation:
            return (
                f"{type_}={cond['status']} gen {cond.get('observedGeneration')}/{generation} "
                f"{cond.get('reason')}: {cond.get('message')}"
            )
    brokers = status.get("brokers") or []
    if [b.get("name") for b in brokers] != list(expected_brokers):
        return f"status.brokers {[b.get('name') for b in brokers]}"
    for entry in brokers:
        if not entry.get("synced") or entry.get("lastError"):
            return (
                f"broker {entry.get('name')} synced={entry.get('synced')} {entry.get('lastError')}"
            )
        mode = (obj.get("spec") or {}).get("consumeMode")
        if plural == "consumergroups" and entry.get("mode") != mode:
            return f"broker {entry.get('name')} mode {entry.get('mode')} != {mode}"
    return None


def stragglers(tb: cluster.Cluster, namespace: str, fleet: Fleet) -> dict[str, str]:
    """``plural/name -> why`` for each object of ``fleet`` not converged (missing ones too)."""
    found = listing(tb, namespace, fleet.prefix)
    out: dict[str, str] = {}
    for plural, name in fleet.names:
        obj = found.get((plural, name))
        why = "missing" if obj is None else why_not_converged(plural, obj, fleet.expected_brokers)
        if why is not None:
            out[f"{plural}/{name}"] = why
    return out


def converged_count(tb: cluster.Cluster, namespace: str, fleet: Fleet) -> int:
    return len(fleet.names) - len(stragglers(tb, namespace, fleet))


def wait_converged(tb: cluster.Cluster, namespace: str, fleet: Fleet, *, timeout_s: float) -> None:
    """Wait until every object of ``fleet`` is converged; on timeout, name the stragglers."""
    last: dict[str, str] = {}

    def check() -> bool:
        nonlocal last
        last = stragglers(tb, namespace, fleet)
        return not last

    try:
        waiting.until(check, timeout_s=timeout_s, what=f"fleet {fleet.prefix} converged")
    except errors.Timeout as exc:
        shown = "\n".join(f"  {k}: {v}" for k, v in sorted(last.items())[:15])
        raise errors.Timeout(f"{exc}: {len(last)} stragglers, e.g.\n{shown}") from exc


def delete(tb: cluster.Cluster, namespace: str, prefix: str) -> None:
    """Delete a fleet (Retain: the brokers keep it) without waiting for the operator to let it
    go: 100 finalizers take the operator about a minute on a busy machine, which the next
    test can overlap (it touches other objects) instead of adding to the module's time."""
    tb.kubectl(
        "delete", "topics,consumergroups", "-n", namespace, "-l", f"{LABEL}={prefix}",
        "--wait=false", timeout_s=60,
    )  # fmt: skip


# ---------------------------------------------------------------- Events and the log


def events(tb: cluster.Cluster, namespace: str) -> list[Obj]:
    return tb.admin.items(f"/api/v1/namespaces/{namespace}/events")


def events_about(found: Sequence[Obj], name: str, *, reason: str | None = None) -> list[Obj]:
    return [
        e
        for e in found
        if e["involvedObject"].get("name") == name and (reason is None or e.get("reason") == reason)
    ]


def tracebacks(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("Traceback")]


def lines_naming(log: str, namespace: str, names: Sequence[str]) -> list[str]:
    """Log lines that name one of ``names`` as kopf does: ``[namespace/name]``."""
    wanted = re.compile(
        r"\[" + re.escape(namespace) + r"/(" + "|".join(map(re.escape, names)) + r")\]"
    )
    return [line for line in log.splitlines() if wanted.search(line)]


def warnings_and_errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line)]


# ---------------------------------------------------------------- brokers


def broker_silent(pod: Obj, *, deadline_s: float) -> bool:
    """True when ``pod``'s admin API gives no answer within ``deadline_s`` (one GetBrokerInfo)."""
    endpoint = f"{cluster.Cluster.pod_ip(pod)}:{story.ADMIN_PORT}"

    async def probe() -> bool:
        async with BrokerAdmin(endpoint, timeout_s=deadline_s) as admin:
            try:
                await admin.info()
            except admin_errors.AdminError as exc:
                return exc.retriable
            return False

    return asyncio.run(probe())


def operator_pod(tb: cluster.Cluster) -> Obj:
    """The operator's pod (one not being deleted: a replaced one may still be going)."""
    pods = tb.pods(OPERATOR_NS, OPERATOR_SELECTOR)
    (pod,) = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return pod


def operator_setting(tb: cluster.Cluster, name: str) -> float:
    """A number the chart put into the operator's environment (``POPFLEET_*``)."""
    pod = operator_pod(tb)
    (container,) = pod["spec"]["containers"]
    for env in container.get("env") or []:
        if env["name"] == name:
            return float(env["value"])
    raise AssertionError(f"the operator pod has no {name}")


# ---------------------------------------------------------------- watching


@dataclass
class Recorder:
    """Every version of the watched objects seen since it started (``watch`` fills it)."""

    seen: list[tuple[str, Obj]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, plural: str, stream: IO[str]) -> None:
        for line in stream:
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") in ("ADDED", "MODIFIED"):
                with self.lock:
                    self.seen.append((plural, event["object"]))

    def versions(self) -> list[tuple[str, Obj]]:
        with self.lock:
            return list(self.seen)


@contextmanager
def watch(tb: cluster.Cluster, namespace: str, prefix: str) -> Iterator[Recorder]:
    """Record every change of the fleet ``prefix`` while the block runs (a kubectl watch per
    kind from the listing's resourceVersion, so that no version in between is missed)."""
    recorder = Recorder()
    procs: list[tuple[subprocess.Popen[str], threading.Thread]] = []
    env = {
        "KUBECONFIG": str(tb.kubeconfig),
        "HOME": str(tb.info.run_dir / "home"),
        "PATH": f"{tb.info.bin_dir}:/usr/bin:/bin",
    }
    try:
        for plural in DOMAIN:
            listed = tb.admin.get(
                story.path(namespace, plural), {"labelSelector": f"{LABEL}={prefix}"}
            )
            version = listed["metadata"]["resourceVersion"]
            url = (
                f"{story.path(namespace, plural)}?watch=1&resourceVersion={version}"
                f"&labelSelector={LABEL}%3D{prefix}"
            )
            proc = subprocess.Popen(
                [str(tb.info.binaries.kubectl), "get", "--raw", url],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            assert proc.stdout is not None
            reader = threading.Thread(target=recorder.read, args=(plural, proc.stdout), daemon=True)
            reader.start()
            procs.append((proc, reader))
        yield recorder
    finally:
        for proc, reader in procs:
            proc.terminate()
            proc.wait(timeout=10)
            reader.join(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
