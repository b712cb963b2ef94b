"""One cached view of each BrokerCluster's brokers, shared by all its Topics and groups.

Every Topic and ConsumerGroup round needs the same three reads of its cluster: the
BrokerCluster (its spec), the admin token Secret and the broker pods. Done per object and
per round, 1,000 objects made 3,000 API calls per resync period and queued on the client
pool; :class:`ClusterViews` makes it one load per cluster per ``ttl_s``:

* **keyed** by (namespace, cluster); a load's result (a :class:`ClusterView`, or None when
  the cluster does not exist or is being deleted) is reused for ``ttl_s`` seconds (clock
  injectable);
* **single flight**: rounds that ask while a load is under way wait for that load instead of
  starting their own; one waiter being cancelled does not cancel the load for the others;
* **invalidated** by :meth:`invalidate` when the cluster or one of its pods changes
  (``handlers.wakeups`` sees those events, ``handlers.clusters`` calls it after each of its
  rounds): the next ``get`` loads again, and a load that was under way when the
  invalidation came is handed to its waiters but not kept;
* a load that fails (the API did not answer, the Secret is missing) is raised to every
  waiter of that load and not kept.

The cache holds any per-cluster value: ``handlers.runtime.Runtime`` keeps two, ``views``
(:func:`load`: spec, token, pods; read by ``handlers.fanning.target``) and ``epochs``
(:func:`config_epochs`: each broker's config epoch; read by resync ticks), and
``Runtime.forget_cluster`` invalidates both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from popfleet_operator.clients import fanout
from popfleet_operator.clients import kube as kube_client
from popfleet_operator.clients.brokers import BrokerPool
from popfleet_operator.model import names, specs
from popfleet_operator.model.observations import BrokerPod

Key = tuple[str, str]  # (namespace, cluster)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a Topic or ConsumerGroup round needs of its cluster.

    ``pods`` are the pods serving the brokers the cluster should have (ordinals below
    ``spec.brokers``; a replicated set's leader), by ordinal; ``token`` the admin token
    (None: no auth).
    """

    cluster: str
    spec: specs.ClusterSpec
    token: str | None
    pods: tuple[BrokerPod, ...]

    @property
    def expected(self) -> tuple[str, ...]:
        """The broker names the cluster should have, whether or not their pods exist."""
        return tuple(names.pod(self.cluster, i) for i in range(self.spec.brokers))


async def load(kube: kube_client.Kube, namespace: str, cluster: str) -> ClusterView | None:
    """The three reads: the BrokerCluster, its admin token and its broker pods."""
    body = await kube.get_or_none(
        kube_client.path(names.API_VERSION, "BrokerCluster", namespace=namespace, name=cluster)
    )
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    spec = specs.parse_cluster(body.get("spec") or {})
    token = await kube_client.admin_token(kube, namespace, spec)
    _, serving, _ = await kube_client.broker_pod_views(kube, namespace, cluster)
    kept = tuple(p for p in serving if p.ordinal < spec.brokers)
    return ClusterView(cluster=cluster, spec=spec, token=token, pods=kept)


async def config_epochs(
    namespace: str,
    cluster: str,
    *,
    views: ClusterViews[ClusterView | None],
    pool: BrokerPool,
) -> dict[str, str]:
    """Broker name -> config epoch, for the cluster's brokers that answered ``info``.

    What a resync tick compares with the epochs its object's status recorded
    (``handlers.fanning``): loaded once per cluster per TTL through a second
    :class:`ClusterViews`, not once per object.
    """
    view = await views.get(namespace, cluster)
    if view is None:
        return {}
    infos = await fanout.observe(view.pods, pool.for_pods(view.pods, view.token))
    return {i.pod.name: i.config_epoch for i in infos if i.reachable and i.config_epoch}


@dataclass
class _Entry(Generic[V]):
    """A load: under way (``loaded_s`` None) or done at ``loaded_s`` (``flight`` holds it)."""

    flight: asyncio.Future[V]
    loaded_s: float | None = None


@dataclass
class ClusterViews(Generic[V]):
    """The cache (module docstring): :meth:`get` and :meth:`invalidate`, for any value."""

    load: Callable[[str, str], Awaitable[V]]
    ttl_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    _entries: dict[Key, _Entry[V]] = field(default_factory=dict)
    _tasks: set[asyncio.Future[None]] = field(default_factory=set)  # loads under way

    async def get(self, namespace: str, cluster: str) -> V:
        key = (namespace, cluster)
        entry = self._entries.get(key)
        if entry is None:
            return await asyncio.shield(self._start(key))
        if entry.loaded_s is None:
            return await asyncio.shield(entry.flight)
        if self.clock() - entry.loaded_s < self.ttl_s:
            return entry.flight.result()
        return await asyncio.shield(self._start(key))

    def invalidate(self, namespace: str, cluster: str) -> None:
        """The cluster or its pods changed: the next :meth:`get` loads again."""
        self._entries.pop((namespace, cluster), None)

    def _start(self, key: Key) -> asyncio.Future[V]:
        loop = asyncio.get_running_loop()
        entry: _Entry[V] = _Entry(flight=loop.create_future())
        self._entries[key] = entry
        entry.flight.add_done_callback(_retrieve)
        self._tasks.add(task := asyncio.ensure_future(self._run(key, entry)))
        task.add_done_callback(self._tasks.discard)
        return entry.flight

    async def _run(self, key: Key, entry: _Entry[V]) -> None:
        try:
            value = await self.load(*key)
        except (Exception, asyncio.CancelledError) as exc:
            if self._entries.get(key) is entry:
                del self._entries[key]
            if isinstance(exc, asyncio.CancelledError):
                entry.flight.cancel()
                raise
            entry.flight.set_exception(exc)
            return
        if self._entries.get(key) is entry:  # not invalidated meanwhile
            entry.loaded_s = self.clock()
        entry.flight.set_result(value)


def _retrieve(flight: asyncio.Future[Any]) -> None:
    """Mark a failed load's error as seen even when every waiter was cancelled."""
    if not flight.cancelled():
        flight.exception()
