"""A BrokerCluster's pod template changes: brokers restart one at a time, gated by the operator.

On the testbed the StatefulSet controller is the real kube-controller-manager's (RollingUpdate
with a partition, Parallel pods); the pods are process-kubelet pods running our broker, and
the operator is the chart's pod. The image tag changes (the testbed's image table maps every
``popfleet/broker`` tag to the same broker), so the template and the revision change and
every pod is replaced for real. The operator runs with a resync interval longer than the
test, so the rollout moves on pod events alone. While it happens the test samples the
StatefulSet and the pods every 0.1 s and checks: the partition goes 2 -> 1 -> 0, the pods
are replaced highest ordinal first, each only after the one before is back Ready, and never
are two brokers away at once. Then an image that cannot start: the rollout stops at demo-2
with a Degraded condition and a Warning, demo-0 and demo-1 keep running; the image set back,
demo-2 returns and nothing else restarts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from popfleet_testbed import cluster, kube, waiting
from tests.integration.operator import story
from tests.integration.operator.conftest import RELEASE_NAMESPACE

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("operator_log_clean")]

CLUSTER = "rolling"
NAMES = [f"{CLUSTER}-{i}" for i in range(3)]
NEW_IMAGE = "ghcr.io/popfleet/broker:0.1.1"
BROKEN_IMAGE = "ghcr.io/popfleet/no-such-broker:1.0"  # not in the testbed's image table
SLOW_RESYNC_S = 900  # longer than this module's waits: progress comes from pod events


@pytest.fixture(scope="module")
def slow_resync(popfleet_release: cluster.Cluster) -> Iterator[cluster.Cluster]:
    """The operator with a resync interval longer than any wait here, for this module only.

    So a rollout can only move on because pod events wake the BrokerCluster (``pod_changed``)
    or a Degraded round is retried, never because the resync timer ticked.
    """
    slow = f"operator.resyncIntervalSeconds={SLOW_RESYNC_S}"
    story.install_chart(
        popfleet_release, release="popfleet", namespace=RELEASE_NAMESPACE, values=(slow,)
    )
    pod = story.operator_pod(popfleet_release, RELEASE_NAMESPACE)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    assert env["POPFLEET_RESYNC_INTERVAL_S"] == str(SLOW_RESYNC_S)
    yield popfleet_release
    story.install_chart(popfleet_release, release="popfleet", namespace=RELEASE_NAMESPACE)


@pytest.fixture(scope="module")
def ns(slow_resync: cluster.Cluster) -> Iterator[str]:
    name = slow_resync.new_namespace("rolling")
    slow_resync.apply(name, story.brokers_cr(CLUSTER, 3))
    yield name
    slow_resync.delete_namespace(name)


@dataclass(frozen=True)
class Sample:
    partition: int
    uids: dict[str, str]  # pod name -> uid, for pods that exist and are not terminating
    ready: frozenset[str]
    images: dict[str, str]

    @property
    def away(self) -> list[str]:
        return [name for name in NAMES if name not in self.ready]


def sample(tb: cluster.Cluster, ns: str) -> Sample:
    sts = tb.admin.get(kube.ns_path(ns, "statefulsets", CLUSTER, group="apps/v1"))
    rolling = (sts["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {}
    pods = tb.pods(ns, f"popfleet.io/cluster={CLUSTER}")
    alive = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return Sample(
        partition=int(rolling.get("partition") or 0),
        uids={p["metadata"]["name"]: p["metadata"]["uid"] for p in alive},
        ready=frozenset(p["metadata"]["name"] for p in alive if tb.is_ready(p)),
        images={p["metadata"]["name"]: p["spec"]["containers"][0]["image"] for p in alive},
    )


def ready_cluster(tb: cluster.Cluster, ns: str) -> dict[str, Any]:
    """Ready for the current generation, with no rollout left in the status."""
    return story.wait_condition(
        tb, ns, "brokerclusters", CLUSTER, "Ready", timeout_s=180,
        also=lambda bc: "rollout" not in bc["status"] and bc["status"]["readyBrokers"] == 3,
    )  # fmt: skip


def changes(values: list[Any]) -> list[Any]:
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


def timeline(samples: list[Sample]) -> str:
    """What changed, sample by sample: partition, then each broker's image tag and state."""

    def line(s: Sample) -> str:
        pods = " ".join(
            f"{n}:{s.images[n].rsplit(':', 1)[-1]}:{'up' if n in s.ready else 'AWAY'}"
            if n in s.uids
            else f"{n}:-:AWAY"
            for n in NAMES
        )
        return f"partition={s.partition} {pods}"

    return "\n".join(changes([line(s) for s in samples]))


def test_an_image_change_restarts_one_broker_at_a_time(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    tb = popfleet_release
    ready_cluster(tb, ns)
    before = sample(tb, ns)
    assert before.partition == 0 and before.away == []
    story.patch_spec(tb, ns, "brokerclusters", CLUSTER, {"image": NEW_IMAGE})
    samples: list[Sample] = []

    def rolled() -> bool:
        now = sample(tb, ns)
        samples.append(now)
        done = all(now.images.get(name) == NEW_IMAGE for name in NAMES)
        return done and now.away == [] and now.partition == 0

    waiting.until(rolled, timeout_s=180, interval_s=0.1, what="every broker on the new image")
    bc = ready_cluster(tb, ns)

    seen = timeline([before, *samples])
    print(seen)  # shown with -s, and on failure
    partitions = changes([before.partition] + [s.partition for s in samples])
    assert partitions == [0, 2, 1, 0], seen
    assert max(len(s.away) for s in samples) <= 1, f"two brokers away at once:\n{seen}"

    def replaced(name: str) -> int:
        old = before.uids[name]
        return next(i for i, s in enumerate(samples) if s.uids.get(name, old) != old)

    assert sorted(NAMES, key=replaced) == list(reversed(NAMES))
    # The partition passed each broker only once it was back, Ready, on the new image.
    gated = samples[next(i for i, s in enumerate(samples) if s.partition == 2) :]
    for ordinal, name in ((1, NAMES[2]), (0, NAMES[1])):
        first = next(s for s in gated if s.partition <= ordinal)
        assert name in first.ready and first.images[name] == NEW_IMAGE, (name, first)
    assert story.condition(bc, "Reconciling")["reason"] == "Reconciled"
    story.wait_event(tb, ns, "RollingUpdate", "brokers restart one at a time")
    story.wait_event(tb, ns, "BrokerUpdated", f"{NAMES[2]} updated, Ready and re-applied")
    story.wait_event(tb, ns, "BrokerUpdated", f"next {NAMES[0]}")
    story.wait_event(tb, ns, "RolloutComplete", "all 3 brokers updated")
    pods = story.broker_pods(tb, ns, CLUSTER)
    endpoints = sorted((b["name"], b["endpoint"]) for b in bc["status"]["brokers"])
    for pod in pods:
        members = story.on_broker(pod, lambda admin: admin.members())
        assert sorted((m.broker_name, m.endpoint) for m in members) == endpoints


def test_a_broker_that_cannot_start_stops_the_rollout(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    tb = popfleet_release
    ready_cluster(tb, ns)
    before = sample(tb, ns)
    story.patch_spec(tb, ns, "brokerclusters", CLUSTER, {"image": BROKEN_IMAGE})
    bc = story.wait_condition(
        tb, ns, "brokerclusters", CLUSTER, "Degraded", reason="RolloutStuck", timeout_s=90
    )
    why = story.condition(bc, "Degraded")["message"]
    assert why.startswith(f"{NAMES[2]} is not healthy after the update"), why
    assert story.condition(bc, "Reconciling")["reason"] == "RollingUpdate"
    assert bc["status"]["rollout"]["partition"] == 2
    story.wait_event(tb, ns, "RolloutStuck", NAMES[2])
    # Several retried rounds later (Degraded is retried with back-off): only demo-2 touched.
    held: list[Sample] = []

    def settled() -> bool:
        held.append(sample(tb, ns))
        return len(held) >= 80  # about 8 s at 0.1 s

    waiting.until(settled, timeout_s=60, interval_s=0.1, what="samples while stuck")
    for s in held:
        assert s.partition == 2
        assert [s.uids.get(n) for n in NAMES[:2]] == [before.uids[n] for n in NAMES[:2]]
        assert s.ready >= set(NAMES[:2])

    story.patch_spec(tb, ns, "brokerclusters", CLUSTER, {"image": NEW_IMAGE})
    bc = ready_cluster(tb, ns)
    assert story.condition(bc, "Degraded")["status"] == "False"
    after = sample(tb, ns)
    assert after.partition == 0
    assert [after.uids[n] for n in NAMES[:2]] == [before.uids[n] for n in NAMES[:2]]
    assert after.uids[NAMES[2]] != before.uids[NAMES[2]]
