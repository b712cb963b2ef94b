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

Callers: ``handlers.fanning.target`` (through ``handlers.runtime.Runtime.views``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from popfleet_operator.clients import kube as kube_client
from popfleet_operator.model import names, specs
from popfleet_operator.model.observations import BrokerPod

Key = tuple[str, str]  # (namespace, cluster)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a Topic or ConsumerGroup round needs of its cluster.

    ``pods`` are the broker pods the cluster should have (ordinals below ``spec.brokers``),
    by ordinal; ``token`` the admin token (None: no auth).
    """

    cluster: str
    spec: specs.ClusterSpec
    token: str | None
    pods: tuple[BrokerPod, ...]

    @property
    def expected(self) -> tuple[str, ...]:
        """The broker names the cluster should have, whether or not their pods exist."""
        return tuple(names.pod(self.cluster, i) for i in range(self.spec.brokers))


Load = Callable[[str, str], Awaitable[ClusterView | None]]


async def load(kube: kube_client.Kube, namespace: str, cluster: str) -> ClusterView | None:
    """The three reads: the BrokerCluster, its admin token and its broker pods."""
    body = await kube.get_or_none(
        kube_client.path(names.API_VERSION, "BrokerCluster", namespace=namespace, name=cluster)
    )
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    spec = specs.parse_cluster(body.get("spec") or {})
    token = await kube_client.admin_token(kube, namespace, spec)
    pods = await kube_client.broker_pods(kube, namespace, cluster)
    kept = tuple(p for p in pods if p.ordinal < spec.brokers)
    return ClusterView(cluster=cluster, spec=spec, token=token, pods=kept)


@dataclass
class _Entry:
    """A load under way (``flight`` set) or done (``flight`` None, loaded at ``loaded_s``)."""

    flight: asyncio.Future[ClusterView | None] | None
    loaded_s: float = 0.0
    view: ClusterView | None = None


@dataclass
class ClusterViews:
    """The cache (module docstring): :meth:`get` and :meth:`invalidate`."""

    load: Load
    ttl_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    _entries: dict[Key, _Entry] = field(default_factory=dict)

    async def get(self, namespace: str, cluster: str) -> ClusterView | None:
        key = (namespace, cluster)
        entry = self._entries.get(key)
        if entry is None:
            flight = self._start(key)
        elif entry.flight is not None:
            flight = entry.flight
        elif self.clock() - entry.loaded_s < self.ttl_s:
            return entry.view
        else:
            flight = self._start(key)
        return await asyncio.shield(flight)

    def invalidate(self, namespace: str, cluster: str) -> None:
        """The cluster or its pods changed: the next :meth:`get` loads again."""
        self._entries.pop((namespace, cluster), None)

    def _start(self, key: Key) -> asyncio.Future[ClusterView | None]:
        entry = _Entry(flight=None)
        flight = asyncio.ensure_future(self._run(key, entry))
        flight.add_done_callback(_retrieve)
        entry.flight = flight
        self._entries[key] = entry
        return flight

    async def _run(self, key: Key, entry: _Entry) -> ClusterView | None:
        try:
            view = await self.load(*key)
        except BaseException:
            if self._entries.get(key) is entry:
                del self._entries[key]
            raise
        if self._entries.get(key) is entry:  # not invalidated meanwhile
            entry.view, entry.loaded_s, entry.flight = view, self.clock(), None
        return view


def _retrieve(flight: asyncio.Future[ClusterView | None]) -> None:
    """Mark a failed load's error as seen even when every waiter was cancelled."""
    if not flight.cancelled():
        flight.exception()
