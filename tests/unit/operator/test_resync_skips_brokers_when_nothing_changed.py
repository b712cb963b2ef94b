"""A resync tick skips the brokers when the status is steady and no epoch moved, reads them
back when its verify period comes round or a broker's epoch changed (``planning.resync``)."""

from __future__ import annotations

import time
from typing import Any, cast

import kopf
import pytest

from popfleet_api.testing import InMemoryBrokerAdmin
from popfleet_operator.clients import clusterviews
from popfleet_operator.clients.brokers import BrokerPool
from popfleet_operator.handlers import fanning, runtime, topics
from popfleet_operator.model import specs
from popfleet_operator.model.observations import BrokerPod
from popfleet_operator.planning import resync
from popfleet_operator.status import conditions as c

EXPECTED = ("demo-0", "demo-1", "demo-2")
UID = "uid-orders"


# ---------------------------------------------------------------- the pure rules


def status(*, epochs: dict[str, str], generation: int = 4, synced: str = "True") -> dict[str, Any]:
    condition = {"type": c.TOPIC_SYNCED, "status": synced, "observedGeneration": generation}
    return {
        "observedGeneration": generation,
        "conditions": [condition],
        "brokers": [{"name": b, "configEpoch": e} for b, e in epochs.items()],
    }


EPOCHS = {b: f"e-{b}" for b in EXPECTED}


def steady(found: dict[str, Any], epochs: dict[str, str] = EPOCHS, generation: int = 4) -> bool:
    return resync.steady(
        found, domain=c.TOPIC_SYNCED, generation=generation, expected=EXPECTED, epochs=epochs
    )


def test_steady_when_synced_for_this_generation_and_no_epoch_moved() -> None:
    assert steady(status(epochs=EPOCHS))


@pytest.mark.parametrize(
    "why",
    ["not synced", "new generation", "epoch moved", "broker silent", "broker added"],
)
def test_not_steady(why: str) -> None:
    found = status(epochs=EPOCHS, synced="False" if why == "not synced" else "True")
    epochs = dict(EPOCHS)
    if why == "epoch moved":
        epochs["demo-1"] = "e-new"
    if why == "broker silent":
        del epochs["demo-2"]
    if why == "broker added":
        found["brokers"] = found["brokers"][:2]
    assert not steady(found, epochs, generation=5 if why == "new generation" else 4)


def test_verify_periods_are_spread_over_objects() -> None:
    verify_s = 300.0
    phases = [resync.phase_s(f"uid-{i}", verify_s=verify_s) for i in range(1000)]
    assert all(0 <= p < verify_s for p in phases)
    per_minute = [sum(1 for p in phases if m * 60 <= p < (m + 1) * 60) for m in range(5)]
    assert all(150 < n < 250 for n in per_minute)  # about 200 each, none all at once


def test_a_full_round_is_due_once_per_period() -> None:
    verify_s = 300.0
    start = resync.slot(UID, now_s=10_000.0, verify_s=verify_s)
    assert resync.verify_due(None, UID, now_s=10_000.0, verify_s=verify_s)
    assert not resync.verify_due(start, UID, now_s=10_000.0, verify_s=verify_s)
    due = [
        t
        for t in range(10_000, 10_000 + 900, 30)
        if resync.verify_due(start, UID, now_s=float(t), verify_s=verify_s)
    ]
    assert due and due[0] - 10_000 <= verify_s  # the next period begins within one period


# ---------------------------------------------------------------- a tick, end to end


def make_runtime(brokers: dict[str, InMemoryBrokerAdmin]) -> runtime.Runtime:
    by_endpoint = {f"10.0.0.{i}:9877": brokers[f"demo-{i}"] for i in range(3)}
    pool = BrokerPool(lambda endpoint, token: by_endpoint[endpoint])
    rt = runtime.Runtime(kube=cast(Any, None), pool=pool)
    pods = tuple(
        BrokerPod(name=f"demo-{i}", ordinal=i, pod_ip=f"10.0.0.{i}", ready=True) for i in range(3)
    )
    view = clusterviews.ClusterView(
        cluster="demo", spec=specs.parse_cluster({"brokers": 3}), token=None, pods=pods
    )

    async def load(namespace: str, cluster: str) -> clusterviews.ClusterView | None:
        return view

    rt.views = clusterviews.ClusterViews(load)
    return rt


def topic_body(found: dict[str, Any]) -> kopf.Body:
    raw = {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "Topic",
        "metadata": {
            "name": "orders",
            "namespace": "ns",
            "uid": UID,
            "generation": 4,
            "creationTimestamp": "2026-11-25T10:00:00Z",
        },
        "spec": {"clusterRef": {"name": "demo"}, "queues": 8},
        "status": found,
    }
    return kopf.Body(cast(kopf.RawBody, raw))


async def tick(rt: runtime.Runtime, found: dict[str, Any], memo: dict[str, Any]) -> kopf.Patch:
    patch = kopf.Patch()
    await fanning.reconcile(
        topics.TOPICS,
        body=topic_body(found),
        patch=patch,
        memo={"runtime": rt, **memo},
        index=cast(Any, {}),
        tick=True,
    )
    return patch


def current_slot() -> int:
    return resync.slot(UID, now_s=time.time(), verify_s=runtime.VERIFY_INTERVAL_S)


async def topics_on(brokers: dict[str, InMemoryBrokerAdmin]) -> list[list[str]]:
    return [[t.name for t in await admin.topics()] for admin in brokers.values()]


def broker_calls(brokers: dict[str, InMemoryBrokerAdmin]) -> list[str]:
    return [call for admin in brokers.values() for call in admin.calls]


async def test_a_steady_tick_reads_only_the_shared_epochs_and_writes_nothing(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    rt = make_runtime(brokers)
    recorded = {name: admin.config_epoch for name, admin in brokers.items()}
    memo = {fanning.VERIFIED_SLOT: current_slot()}
    for _ in range(5):  # five objects' ticks, or one object's five
        assert await tick(rt, status(epochs=recorded), memo) == {}
    assert sorted(broker_calls(brokers)) == ["info", "info", "info"]  # once per TTL
    assert await topics_on(brokers) == [[], [], []]  # brokers untouched


async def test_a_tick_reads_back_when_its_verify_period_comes_round(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    rt = make_runtime(brokers)
    recorded = {name: admin.config_epoch for name, admin in brokers.items()}
    memo: dict[str, Any] = {fanning.VERIFIED_SLOT: current_slot() - 1}
    await tick(rt, status(epochs=recorded), memo)
    assert await topics_on(brokers) == [["orders"]] * 3


async def test_a_broker_back_with_a_new_epoch_makes_the_tick_read_back(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    rt = make_runtime(brokers)
    recorded = {name: admin.config_epoch for name, admin in brokers.items()}
    memo = {fanning.VERIFIED_SLOT: current_slot()}
    where = await fanning.target(rt, "ns", "demo")
    body = topic_body(status(epochs=recorded))
    assert await fanning.unchanged(topics.TOPICS, rt=rt, body=body, memo=memo, where=where)
    brokers["demo-1"].config_epoch = "after-an-empty-restart"
    rt.forget_cluster("ns", "demo")  # what the broker pod's event does
    assert not await fanning.unchanged(topics.TOPICS, rt=rt, body=body, memo=memo, where=where)
