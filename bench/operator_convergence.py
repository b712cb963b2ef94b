"""Mode-switch convergence: ``kubectl patch`` of a ConsumerGroup -> every broker confirmed.

On its own local testbed (real apiserver, the chart-installed operator as a pod, 3 broker
pods), a ConsumerGroup is switched back and forth between PULL and POP (with a changing
``popShareQueueNum``) ``--edits`` times (default 100, so that p99 is not just the maximum),
within a ``--budget-s`` wall-clock budget for the edits (default 180 s). Each sample is the
wall time from the PATCH to the moment the CR reports ``ModeApplied=True`` for the new
generation with every broker's read-back showing the new mode -- the operator's answer,
which it gives only after reading each broker back. The status is polled every 20 ms,
which bounds the resolution.

The operator's resync interval is left at the chart's default (30 s) so that the figure is
the change handler's, not the timer's. Nothing asserts a timing (benchmarks are not tests).

Run: ``make bench`` or ``python -m bench.operator_convergence [--edits 100]``; needs the
testbed binaries (``make testbed-bin``). JSON: ``bench/results/operator_convergence.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common
from popfleet_testbed import binaries, cluster, controlplane, kube, waiting

ROOT = Path(__file__).resolve().parents[1]
NS = "bench"
GROUP_PATH = kube.ns_path(NS, "consumergroups", "billing", group="popfleet.io/v1alpha1")
POLL_S = 0.02


def manifests() -> list[dict[str, Any]]:
    ref = {"name": "demo"}
    return [
        {
            "apiVersion": "popfleet.io/v1alpha1",
            "kind": "BrokerCluster",
            "metadata": {"name": "demo"},
            "spec": {"brokers": 3, "storage": {"size": "64Mi"}},
        },
        {
            "apiVersion": "popfleet.io/v1alpha1",
            "kind": "Topic",
            "metadata": {"name": "orders"},
            "spec": {"clusterRef": ref, "queues": 8},
        },
        {
            "apiVersion": "popfleet.io/v1alpha1",
            "kind": "ConsumerGroup",
            "metadata": {"name": "billing"},
            "spec": {"clusterRef": ref, "topics": [{"name": "orders"}], "consumeMode": "PULL"},
        },
    ]


def converged(obj: dict[str, Any] | None, mode: str, share: int) -> bool:
    if obj is None:
        return False
    status = obj.get("status") or {}
    conditions: list[dict[str, Any]] = status.get("conditions") or []
    applied = next((c for c in conditions if c["type"] == "ModeApplied"), {})
    brokers = status.get("brokers") or []
    return (
        applied.get("status") == "True"
        and applied.get("observedGeneration") == obj["metadata"]["generation"]
        and len(brokers) == 3
        and all(b.get("mode") == mode and b.get("popShareQueueNum") == share for b in brokers)
    )


def wait_converged(tb: cluster.Cluster, mode: str, share: int, timeout_s: float) -> float:
    start = time.monotonic()
    deadline = start + timeout_s
    while time.monotonic() < deadline:
        if converged(tb.admin.get_or_none(GROUP_PATH), mode, share):
            return time.monotonic() - start
        time.sleep(POLL_S)
    raise TimeoutError(f"no convergence to {mode}/{share} within {timeout_s}s")


def measure(tb: cluster.Cluster, edits: int, budget_s: float) -> list[float]:
    samples: list[float] = []
    stop_at = time.monotonic() + budget_s
    for i in range(edits):
        if time.monotonic() >= stop_at:
            break
        mode, share = ("POP", 1 + i % 3) if i % 2 == 0 else ("PULL", 0)
        patch = {"spec": {"consumeMode": mode, "popShareQueueNum": share}}
        start = time.monotonic()
        tb.admin.patch(GROUP_PATH, patch, content_type=kube.MERGE)
        wait_converged(tb, mode, share, timeout_s=60)
        samples.append(time.monotonic() - start)
    return samples


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.operator_convergence")
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--budget-s", type=float, default=180.0)
    args = parser.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix="popfleet-bench-"))
    info = controlplane.up(run_dir, bins=binaries.locate())
    tb = cluster.Cluster(info)
    try:
        tb.helm(
            "install", "popfleet", str(ROOT / "charts" / "popfleet"), "-n", "popfleet-system",
            "--create-namespace", "--wait", "--timeout", "120s", timeout_s=180,
        )  # fmt: skip
        tb.admin.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        waiting.until(
            lambda: tb.admin.get_or_none(kube.ns_path(NS, "serviceaccounts", "default")),
            timeout_s=30,
            what="default ServiceAccount",
        )
        tb.apply(NS, *manifests())
        setup_start = time.monotonic()
        try:
            wait_converged(tb, "PULL", 0, timeout_s=120)
            setup_s = time.monotonic() - setup_start
            samples = measure(tb, args.edits, args.budget_s)
        except TimeoutError:
            print(tb.kubectl("get", "popfleet,pods", "-A", "-o", "wide"))
            print(tb.kubectl("logs", "-n", "popfleet-system", "deploy/popfleet", "--tail=60"))
            raise
    finally:
        tb.close()
        controlplane.down(run_dir, remove=True)
        shutil.rmtree(run_dir, ignore_errors=True)
    payload = {
        "what": "ConsumerGroup consumeMode/popShareQueueNum edit -> ModeApplied on all 3 "
        "brokers (read back), seconds",
        "edits": len(samples),
        "poll_s": POLL_S,
        "first_apply_from_empty_cluster_s": round(setup_s, 3),
        "p50_s": round(percentile(samples, 0.5), 3),
        "p99_s": round(percentile(samples, 0.99), 3),
        "mean_s": round(statistics.mean(samples), 3),
        "max_s": round(max(samples), 3),
        "samples_s": [round(s, 3) for s in samples],
    }
    path = common.write("operator_convergence", payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "samples_s"}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
