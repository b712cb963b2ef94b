"""Operator at scale: N Topics + N ConsumerGroups applied at once on a 3-broker cluster.

For each N in ``--sizes`` (default 100, 500, 1000) a fresh local testbed (real apiserver, the
chart-installed operator as a pod under the process kubelet, 3 broker pods) gets:

1. ``N`` Topics, then ``N`` ConsumerGroups (group ``g-i`` consumes topic ``t-i``, PULL), all
   created as fast as 4 client threads can POST them: **apply time**;
2. from the first create on, while they are created and converge: one PULL->POP switch of
   ``g-0000`` as soon as it exists, i.e. with half the fleet still to come (**switch during
   the bulk**), and the fleet's status listed once a second: **time until every CR has
   converged**, from the first create and after the last one (Topic: ``TopicSynced``,
   ConsumerGroup: ``ModeApplied``, both for the current generation), **stragglers** at
   30/60/120 s, and CRs that had converged and then fell back to ``BrokerUnreachable``
   although every broker was up;
3. ``--switches`` (default 20) switches of ``g-0001`` one after another: p50/p99/max;
4. ``--steady-s`` (default 60) seconds with nothing changing: the operator's CPU (% of one
   core) and RSS at steady state.

Throughout, the operator process's RSS and CPU time are sampled every second from /proc
(its PID from the testbed kubelet's pid file; re-read, so a restart is followed), giving
peak RSS and CPU during the bulk. Also reported: the apiserver's request count and its 429s
over the run (from its /metrics; everything counted, our own listing included, which is
reported separately), the operator pod's restarts and the tracebacks in its log.

Nothing asserts a timing (benchmarks are not tests); the targets are in issue 15 and
docs/benchmarks.md. The testbed enforces no memory limit: the peak RSS is compared with the
chart's limit in the report.

Run: ``make bench`` or ``python -m bench.operator_scale [--sizes 100,500,1000]``; needs the
testbed binaries (``make testbed-bin``). JSON: ``bench/results/operator_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench import common
from bench.scaletargets import (
    OPERATOR_NS,
    OPERATOR_SELECTOR,
    KindTarget,
    Sample,
    Target,
    TestbedTarget,
)
from popfleet_testbed import binaries, cluster, controlplane, kube, waiting

ROOT = Path(__file__).resolve().parents[1]
NS = "scale"
API = "popfleet.io/v1alpha1"
QUEUES = 4
BROKERS = 3
CREATE_THREADS = 4
CONVERGE_TIMEOUT_S = 600.0
STRAGGLER_MARKS_S = (30, 60, 120)


def topic(i: int) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Topic",
        "metadata": {"name": f"t-{i:04d}", "namespace": NS},
        "spec": {"clusterRef": {"name": "demo"}, "queues": QUEUES},
    }


def group(i: int) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ConsumerGroup",
        "metadata": {"name": f"g-{i:04d}", "namespace": NS},
        "spec": {
            "clusterRef": {"name": "demo"},
            "topics": [{"name": f"t-{i:04d}"}],
            "consumeMode": "PULL",
        },
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def converged(obj: dict[str, Any], domain: str) -> bool:
    found = condition(obj, domain)
    return (
        found.get("status") == "True"
        and found.get("observedGeneration", obj["metadata"]["generation"])
        == obj["metadata"]["generation"]
    )


def mode_converged(obj: dict[str, Any] | None, mode: str, share: int) -> bool:
    if obj is None or not converged(obj, "ModeApplied"):
        return False
    brokers = (obj.get("status") or {}).get("brokers") or []
    return len(brokers) == BROKERS and all(
        b.get("mode") == mode and b.get("popShareQueueNum") == share for b in brokers
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# -- the operator process, sampled once a second ---------------------------------------------


@dataclass
class ProcessWatch:
    """Samples the operator's RSS and CPU time once a second on a thread of its own
    (``Target.operator_sample``: /proc on the testbed, its own metrics on kind)."""

    target: Target
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> Sample | None:
        return self.target.operator_sample()

    def run(self) -> None:
        while not self._stop.wait(1.0):
            found = self.sample()
            if found is not None:
                self.samples.append(found)

    @contextmanager
    def watching(self) -> Iterator[ProcessWatch]:
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(timeout=5)

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.at <= end]


def cpu_percent(samples: list[Sample]) -> float | None:
    """Mean CPU use over ``samples`` in % of one core (None when a restart splits them)."""
    if len(samples) < 2 or samples[-1].cpu_s < samples[0].cpu_s:
        return None
    return round(100 * (samples[-1].cpu_s - samples[0].cpu_s) / (samples[-1].at - samples[0].at), 1)


def mib(value: int) -> float:
    return round(value / 2**20, 1)


# -- the apiserver's own count of requests ---------------------------------------------------


def counter_total(text: str, name: str, **labels: str) -> int | None:
    """Sum of the counter ``name`` (its ``_total`` samples matching ``labels``) in a Prometheus
    exposition; None when the exposition has no such counter."""
    found = None
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name == f"{name}_total" and labels.items() <= sample.labels.items():
                found = (found or 0) + int(sample.value)
    return found


STORE_METRICS_PORT = 9100  # names.METRICS_PORTS["store"]


def admin_calls(target: Target) -> int | None:
    """Admin API calls every broker's store role has answered (None: a broker did not say)."""
    total = 0
    pods = target.pods(NS, "app.kubernetes.io/name=popfleet-broker")
    if len(pods) != BROKERS:
        return None
    for pod in pods:
        try:
            text = target.metrics(pod, STORE_METRICS_PORT)
        except (OSError, RuntimeError, subprocess.TimeoutExpired):
            return None
        found = counter_total(text, "popfleet_admin_requests")
        if found is None:
            return None  # a broker without the counter (before it existed)
        total += found
    return total


def apiserver_requests(target: Target) -> tuple[int, int]:
    """(all requests, of which 429) the apiserver has answered since it started."""
    text = target.kubectl("get", "--raw", "/metrics")
    total = counter_total(text, "apiserver_request") or 0
    return total, counter_total(text, "apiserver_request", code="429") or 0


# -- one size ----------------------------------------------------------------------------------


@dataclass
class Fleet:
    """What the once-a-second listing saw."""

    first_converged_s: dict[str, float] = field(default_factory=dict)
    fell_back: set[str] = field(default_factory=set)
    stragglers: dict[int, int] = field(default_factory=dict)
    listings: int = 0


def observe(target: Target, fleet: Fleet, *, start: float, total: int) -> None:
    """List every CR once; note first convergence and falls back to BrokerUnreachable."""
    now = time.monotonic() - start
    for resource, domain in (("topics", "TopicSynced"), ("consumergroups", "ModeApplied")):
        for obj in target.admin.items(kube.ns_path(NS, resource, group=API)):
            name = f"{resource}/{obj['metadata']['name']}"
            if converged(obj, domain):
                fleet.first_converged_s.setdefault(name, now)
            elif (
                name in fleet.first_converged_s
                and condition(obj, "Ready").get("reason") == "BrokerUnreachable"
            ):
                fleet.fell_back.add(name)
        fleet.listings += 1
    for mark in STRAGGLER_MARKS_S:
        if mark not in fleet.stragglers and now >= mark:
            fleet.stragglers[mark] = total - len(fleet.first_converged_s)


def create_all(target: Target, objects: list[dict[str, Any]]) -> None:
    local = threading.local()

    def create(obj: dict[str, Any]) -> None:
        if not hasattr(local, "client"):
            local.client = kube.Kube(target.kubeconfig, timeout_s=60)
        plural = "topics" if obj["kind"] == "Topic" else "consumergroups"
        local.client.create(kube.ns_path(NS, plural, group=API), obj)

    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(create, objects))


def switch(target: Target, name: str, mode: str, share: int, *, timeout_s: float) -> float:
    path = kube.ns_path(NS, "consumergroups", name, group=API)
    start = time.monotonic()
    target.admin.patch(path, {"spec": {"consumeMode": mode, "popShareQueueNum": share}},
                   content_type=kube.MERGE)  # fmt: skip
    deadline = start + timeout_s
    while time.monotonic() < deadline:
        if mode_converged(target.admin.get_or_none(path), mode, share):
            return time.monotonic() - start
        time.sleep(0.05)
    return float("inf")


def chart_memory_limit() -> str:
    values = yaml.safe_load((ROOT / "charts" / "popfleet" / "values.yaml").read_text())
    return str(values["resources"]["limits"]["memory"])


def set_up(target: Target) -> None:
    """The chart (a fresh operator), the benchmark's namespace, a 3-broker cluster, Ready."""
    target.helm(
        "install", "popfleet", str(ROOT / "charts" / "popfleet"), "-n", OPERATOR_NS,
        "--create-namespace", "--wait", "--timeout", "180s",
        *[a for pair in target.helm_values for a in ("--set", pair)], timeout_s=240,
    )  # fmt: skip
    target.admin.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    waiting.until(
        lambda: target.admin.get_or_none(kube.ns_path(NS, "serviceaccounts", "default")),
        timeout_s=30,
        what="default ServiceAccount",
    )
    target.admin.create(kube.ns_path(NS, "brokerclusters", group=API), {
        "apiVersion": API, "kind": "BrokerCluster", "metadata": {"name": "demo", "namespace": NS},
        "spec": {"brokers": BROKERS, "storage": {"size": "64Mi"}},
    })  # fmt: skip
    path = kube.ns_path(NS, "brokerclusters", "demo", group=API)
    waiting.until(
        lambda: condition(target.admin.get_or_none(path) or {}, "Ready").get("status") == "True",
        timeout_s=300,
        what="BrokerCluster demo Ready",
    )


def on_testbed(
    n: int, *, switches: int, steady_s: float, sets: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One size on a fresh local testbed (started and stopped here)."""
    run_dir = Path(tempfile.mkdtemp(prefix="popfleet-bench-scale-"))
    info = controlplane.up(run_dir, bins=binaries.locate())
    tb = cluster.Cluster(info)
    try:
        target = TestbedTarget(tb, helm_values=sets)
        return one_size(target, n, switches=switches, steady_s=steady_s)
    finally:
        tb.close()
        controlplane.down(run_dir, remove=True)
        shutil.rmtree(run_dir, ignore_errors=True)


def one_size(target: Target, n: int, *, switches: int, steady_s: float) -> dict[str, Any]:
    set_up(target)
    watch = ProcessWatch(target)
    with watch.watching():
        return {"target": target.name, **measure(target, watch, n, switches=switches,
                                                 steady_s=steady_s)}  # fmt: skip


def measure(
    target: Target, watch: ProcessWatch, n: int, *, switches: int, steady_s: float
) -> dict[str, Any]:
    total = 2 * n
    requests_before, throttled_before = apiserver_requests(target)
    admin_before = admin_calls(target)
    idle = watch.sample()
    start = time.monotonic()
    applied: dict[str, float] = {}

    def apply() -> None:
        create_all(target, [topic(i) for i in range(n)] + [group(i) for i in range(n)])
        applied["s"] = time.monotonic() - start

    creator = threading.Thread(target=apply, daemon=True)
    creator.start()
    bulk_switch: dict[str, float] = {}
    switcher = threading.Thread(
        target=lambda: bulk_switch.update(
            s=switch(target, "g-0000", "POP", 1, timeout_s=CONVERGE_TIMEOUT_S)
        ),
        daemon=True,
    )
    first_group = kube.ns_path(NS, "consumergroups", "g-0000", group=API)
    fleet = Fleet()
    deadline = start + CONVERGE_TIMEOUT_S
    while time.monotonic() < deadline:  # observed while the CRs are still being created
        if switcher.ident is None and target.admin.get_or_none(first_group) is not None:
            switcher.start()  # half the fleet is in: the switch lands mid-bulk
        observe(target, fleet, start=start, total=total)
        if len(fleet.first_converged_s) >= total:
            break
        time.sleep(1.0)
    converged_s = time.monotonic() - start if len(fleet.first_converged_s) >= total else None
    creator.join(timeout=CONVERGE_TIMEOUT_S)
    applied_s = applied.get("s", float("inf"))
    if switcher.ident is not None:
        switcher.join(timeout=CONVERGE_TIMEOUT_S)
    bulk_end = time.monotonic()

    after = [
        switch(target, "g-0001", *(("POP", 1 + i % 3) if i % 2 == 0 else ("PULL", 0)), timeout_s=60)
        for i in range(switches)
    ]
    steady_start = time.monotonic()
    fell_back_before_steady = len(fleet.fell_back)
    while time.monotonic() < steady_start + steady_s:
        observe(target, fleet, start=start, total=total)
        time.sleep(5.0)
    steady_end = time.monotonic()
    requests_after, throttled_after = apiserver_requests(target)
    admin_after = admin_calls(target)
    admin_delta = (
        None if admin_before is None or admin_after is None else admin_after - admin_before
    )

    pods = target.pods(OPERATOR_NS, OPERATOR_SELECTOR)
    statuses = (pods[0].get("status") or {}).get("containerStatuses") or [] if pods else []
    log = target.log(pods[0]) if pods else ""
    bulk = watch.between(start, bulk_end)
    steady = watch.between(steady_start, steady_end)
    finite_after = [s for s in after if s != float("inf")]
    return {
        "n_topics": n,
        "n_groups": n,
        "apply_s": round(applied_s, 1),
        "all_converged_s": None if converged_s is None else round(converged_s, 1),
        "converged_after_apply_s": None
        if converged_s is None
        else round(max(0.0, converged_s - applied_s), 1),
        "converged": len(fleet.first_converged_s),
        "not_converged_at_s": {str(k): v for k, v in fleet.stragglers.items()},
        "fell_back_to_unreachable": len(fleet.fell_back),
        "fell_back_during_steady": len(fleet.fell_back) - fell_back_before_steady,
        "switch_during_bulk_s": round(bulk_switch.get("s", float("inf")), 2),
        "switches_after": len(after),
        "switch_after_timeouts": len(after) - len(finite_after),
        "switch_after_p50_s": round(statistics.median(finite_after), 3) if finite_after else None,
        "switch_after_p99_s": round(percentile(finite_after, 0.99), 3) if finite_after else None,
        "switch_after_max_s": round(max(finite_after), 3) if finite_after else None,
        "operator_rss_idle_mib": mib(idle.rss_bytes) if idle else None,
        "operator_rss_peak_mib": mib(max((s.rss_bytes for s in watch.samples), default=0)),
        "operator_rss_steady_mib": mib(steady[-1].rss_bytes) if steady else None,
        "operator_cpu_bulk_percent": cpu_percent(bulk),
        "operator_cpu_steady_percent": cpu_percent(steady),
        "steady_s": round(steady_end - steady_start, 1),
        "operator_restarts": sum(int(s.get("restartCount", 0)) for s in statuses),
        "operator_log_tracebacks": log.count("Traceback (most recent call last)"),
        "apiserver_requests": requests_after - requests_before,
        "apiserver_requests_per_cr": round((requests_after - requests_before) / total, 1),
        "apiserver_429": throttled_after - throttled_before,
        "our_listings": fleet.listings,
        "broker_admin_calls": admin_delta,
        "broker_admin_calls_per_cr": None if admin_delta is None else round(admin_delta / total, 1),
        "chart_memory_limit": chart_memory_limit(),
    }


def record(name: str, runs: list[dict[str, Any]], *, what: str) -> Path:
    """Write the runs, keeping earlier runs of other sizes from the same file (a kind run
    measures one size per cluster, so its sizes arrive one invocation at a time)."""
    path = common.RESULTS / f"{name}.json"
    kept: list[dict[str, Any]] = []
    if path.exists():
        sizes = {r["n_topics"] for r in runs}
        kept = [
            r for r in json.loads(path.read_text()).get("runs", []) if r["n_topics"] not in sizes
        ]
    ordered = sorted([*kept, *runs], key=lambda r: int(r["n_topics"]))
    return common.write(name, {"what": what, "runs": ordered})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.operator_scale")
    parser.add_argument("--sizes", default="100,500,1000")
    parser.add_argument("--switches", type=int, default=20)
    parser.add_argument("--steady-s", type=float, default=60.0)
    parser.add_argument("--target", choices=("testbed", "kind"), default="testbed")
    parser.add_argument("--kubeconfig", type=Path, help="kind: the cluster (e2e/kind/run.sh)")
    parser.add_argument("--bin-dir", type=Path, help="kind: where kubectl and helm are")
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], help="a chart value (KEY=VALUE)"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.target == "kind" and (
        args.kubeconfig is None or args.bin_dir is None or len(sizes) != 1
    ):
        parser.error("--target kind needs --kubeconfig, --bin-dir and one size (a cluster each)")
    runs = []
    for n in sizes:
        print(f"operator_scale ({args.target}): {n} Topics + {n} ConsumerGroups ...", flush=True)
        load_before = os.getloadavg()
        if args.target == "kind":
            target = KindTarget(args.kubeconfig, args.bin_dir, helm_values=tuple(args.sets))
            result = one_size(target, n, switches=args.switches, steady_s=args.steady_s)
        else:
            result = on_testbed(
                n, switches=args.switches, steady_s=args.steady_s, sets=tuple(args.sets)
            )
        result["load_average_before"] = [round(x, 2) for x in load_before]
        result["chart_set"] = list(args.sets)
        result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(result), flush=True)
        runs.append(result)
    where = "a 3-broker testbed cluster" if args.target == "testbed" else "a 3-broker kind cluster"
    name = "operator_scale" if args.target == "testbed" else "operator_scale_kind"
    path = record(name, runs, what=f"N Topics + N ConsumerGroups applied at once on {where}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
