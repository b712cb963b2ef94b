"""``ClusterViews``: one load per cluster per TTL, shared by concurrent rounds, invalidated."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from popfleet_operator import errors
from popfleet_operator.clients import clusterviews
from popfleet_operator.clients.brokers import BrokerPool
from popfleet_operator.handlers import runtime
from popfleet_operator.model import specs
from popfleet_operator.model.observations import BrokerPod


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class Loader:
    """Counts loads; each answers a view whose ``spec.brokers`` is the load's number.

    With ``gate`` set, a load waits for it: the test decides when the apiserver answers.
    """

    def __init__(self, *, gate: asyncio.Event | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.gate = gate
        self.fail: Exception | None = None

    async def __call__(self, namespace: str, cluster: str) -> clusterviews.ClusterView | None:
        self.calls.append((namespace, cluster))
        number = len(self.calls)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        spec = specs.parse_cluster({"brokers": number})
        pod = BrokerPod(name=f"{cluster}-0", ordinal=0, pod_ip="10.0.0.1", ready=True)
        return clusterviews.ClusterView(cluster=cluster, spec=spec, token=None, pods=(pod,))


Views = clusterviews.ClusterViews[clusterviews.ClusterView | None]


def views(loader: Loader, clock: Clock) -> Views:
    return clusterviews.ClusterViews(loader, ttl_s=2.0, clock=clock)


async def brokers_of(cache: Views, cluster: str = "demo") -> int:
    view = await cache.get("ns", cluster)
    assert view is not None
    return view.spec.brokers


async def test_a_view_is_reused_within_the_ttl_and_loaded_again_after_it() -> None:
    clock, loader = Clock(), Loader()
    cache = views(loader, clock)
    assert await brokers_of(cache) == 1
    clock.now_s += 1.9
    assert await brokers_of(cache) == 1
    assert len(loader.calls) == 1
    clock.now_s += 0.1
    assert await brokers_of(cache) == 2
    assert len(loader.calls) == 2


async def test_clusters_are_kept_apart() -> None:
    clock, loader = Clock(), Loader()
    cache = views(loader, clock)
    first, other = await cache.get("ns", "demo"), await cache.get("ns", "other")
    assert first is not None and other is not None
    assert (first.cluster, other.cluster) == ("demo", "other")
    assert first.expected == ("demo-0",)
    assert loader.calls == [("ns", "demo"), ("ns", "other")]


async def test_concurrent_rounds_share_one_load() -> None:
    gate = asyncio.Event()
    loader = Loader(gate=gate)
    cache = views(loader, Clock())
    rounds = [asyncio.ensure_future(cache.get("ns", "demo")) for _ in range(50)]
    while not loader.calls:
        await asyncio.sleep(0)
    assert not any(r.done() for r in rounds)
    gate.set()
    found = await asyncio.gather(*rounds)
    assert len(loader.calls) == 1
    assert all(v is found[0] for v in found)


async def test_a_cancelled_round_does_not_cancel_the_load_for_the_others() -> None:
    gate = asyncio.Event()
    loader = Loader(gate=gate)
    cache = views(loader, Clock())
    first = asyncio.ensure_future(cache.get("ns", "demo"))
    second = asyncio.ensure_future(cache.get("ns", "demo"))
    while not loader.calls:
        await asyncio.sleep(0)
    first.cancel()
    gate.set()
    assert (await second) is not None
    assert first.cancelled()
    assert len(loader.calls) == 1


async def test_invalidation_makes_the_next_round_load_again() -> None:
    clock, loader = Clock(), Loader()
    cache = views(loader, clock)
    assert await brokers_of(cache) == 1
    cache.invalidate("ns", "demo")
    assert await brokers_of(cache) == 2
    cache.invalidate("ns", "other")  # another cluster's event: this view stays
    assert await brokers_of(cache) == 2
    assert len(loader.calls) == 2


async def test_a_load_under_way_when_invalidated_is_not_kept() -> None:
    gate = asyncio.Event()
    loader = Loader(gate=gate)
    cache = views(loader, Clock())
    stale = asyncio.ensure_future(cache.get("ns", "demo"))
    while not loader.calls:
        await asyncio.sleep(0)
    cache.invalidate("ns", "demo")
    fresh = asyncio.ensure_future(cache.get("ns", "demo"))
    gate.set()
    stale_view, fresh_view = await stale, await fresh
    assert stale_view is not None and fresh_view is not None
    assert (stale_view.spec.brokers, fresh_view.spec.brokers) == (1, 2)
    assert await brokers_of(cache) == 2  # the fresh load is the one kept
    assert len(loader.calls) == 2


async def test_a_failed_load_reaches_every_waiter_and_is_not_kept() -> None:
    gate = asyncio.Event()
    loader = Loader(gate=gate)
    loader.fail = errors.KubeError("GET /x: no answer (TimeoutError)", status=0)
    cache = views(loader, Clock())
    rounds = [asyncio.ensure_future(cache.get("ns", "demo")) for _ in range(3)]
    while not loader.calls:
        await asyncio.sleep(0)
    gate.set()
    for found in await asyncio.gather(*rounds, return_exceptions=True):
        assert found is loader.fail
    loader.fail = None
    assert await brokers_of(cache) == 2
    assert len(loader.calls) == 2


async def test_a_missing_cluster_is_remembered_until_invalidated() -> None:
    calls: list[str] = []

    async def missing(namespace: str, cluster: str) -> clusterviews.ClusterView | None:
        calls.append(cluster)
        return None

    cache = clusterviews.ClusterViews(missing, ttl_s=2.0, clock=Clock())
    assert await cache.get("ns", "demo") is None
    assert await cache.get("ns", "demo") is None
    assert calls == ["demo"]
    cache.invalidate("ns", "demo")  # the BrokerCluster was created
    assert await cache.get("ns", "demo") is None
    assert calls == ["demo", "demo"]


@pytest.mark.parametrize("brokers", [1, 3])
async def test_expected_names_every_broker_of_the_spec(brokers: int) -> None:
    view = clusterviews.ClusterView(
        cluster="demo", spec=specs.parse_cluster({"brokers": brokers}), token=None, pods=()
    )
    assert view.expected == tuple(f"demo-{i}" for i in range(brokers))


async def test_forgetting_a_cluster_drops_both_of_its_cached_reads() -> None:
    rt = runtime.Runtime(kube=cast(Any, None), pool=BrokerPool(cast(Any, None)))
    views_loader, epoch_loads = Loader(), list[str]()

    async def epochs(namespace: str, cluster: str) -> dict[str, str]:
        epoch_loads.append(cluster)
        return {}

    rt.views = clusterviews.ClusterViews(views_loader, clock=Clock())
    rt.epochs = clusterviews.ClusterViews(epochs, clock=Clock())
    await rt.views.get("ns", "demo")
    await rt.epochs.get("ns", "demo")
    rt.forget_cluster("ns", "demo")  # what wakeups does on a BrokerCluster or pod event
    assert await brokers_of(rt.views) == 2
    await rt.epochs.get("ns", "demo")
    assert epoch_loads == ["demo", "demo"]
