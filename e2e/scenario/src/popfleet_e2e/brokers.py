"""What each broker itself says: members, consume modes and the group's lag, via the admin API.

Why: a condition on a custom resource is the operator's claim; the scenario checks it against
the brokers. Brokers are found in the BrokerCluster's status (``brokers[].endpoint``, the
advertised client endpoint); the admin API listens on the same host at ``ADMIN_PORT``; both
go through the access's resolver before anything dials them, and admin calls through the
access's ``grpc_proxy`` when it has one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from popfleet_api import errors, models
from popfleet_api.client import BrokerAdmin
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError

ADMIN_PORT = 9877
T = TypeVar("T")


@dataclass(frozen=True)
class Broker:
    name: str
    endpoint: str  # advertised client endpoint, as in-cluster clients see it

    @property
    def admin_endpoint(self) -> str:
        return f"{self.endpoint.rsplit(':', 1)[0]}:{ADMIN_PORT}"


def listed(cluster: Obj) -> list[Broker]:
    """The brokers a BrokerCluster's status lists, in name order."""
    entries = (cluster.get("status") or {}).get("brokers") or []
    return sorted(
        (Broker(e["name"], e["endpoint"]) for e in entries if e.get("endpoint")),
        key=lambda b: b.name,
    )


def current(access: ClusterAccess, cluster_name: str) -> list[Broker]:
    return listed(access.get("brokercluster", cluster_name))


def bootstrap(access: ClusterAccess, brokers: list[Broker], *, cluster: str = "") -> str:
    """The client's bootstrap endpoints, resolved: the client Service of ``cluster`` (named
    like it; its ClusterIP) when the access says so, else every broker joined with ``;``."""
    if access.bootstrap_via_service:
        if not cluster:
            raise ScenarioError("a bootstrap through the client Service needs the cluster's name")
        service = access.get("service", cluster)
        ip = service["spec"].get("clusterIP")
        ports = [p["port"] for p in service["spec"].get("ports", []) if p.get("name") == "client"]
        if not ip or ip == "None" or not ports:
            raise ScenarioError(f"service {cluster} has no ClusterIP client port: {service}")
        return access.resolve(f"{ip}:{ports[0]}")
    return ";".join(access.resolve(b.endpoint) for b in brokers)


def call(access: ClusterAccess, broker: Broker, fn: Callable[[BrokerAdmin], Awaitable[T]]) -> T:
    """One admin call on ``broker``; admin errors become ScenarioError (retriable in waits)."""
    target = access.resolve(broker.admin_endpoint)

    async def run() -> T:
        async with BrokerAdmin(target, timeout_s=5, proxy=access.grpc_proxy) as admin:
            return await fn(admin)

    try:
        return asyncio.run(run())
    except errors.AdminError as exc:
        raise ScenarioError(f"{broker.name} ({target}): {exc}") from exc


def modes(access: ClusterAccess, broker: Broker, group: str) -> list[tuple[str, str, int]]:
    """``(topic, mode, popShareQueueNum)`` of ``group`` as ``broker`` reads it back."""
    settings = call(access, broker, lambda admin: admin.consume_modes(group))
    return [(s.topic, s.mode.value, s.pop_share_queue_num) for s in settings]


def lag(access: ClusterAccess, broker: Broker, group: str, topic: str) -> dict[int, int]:
    """Per queue of ``topic`` on ``broker``: messages not yet taken by ``group``."""
    offsets: models.GroupOffsets = call(access, broker, lambda admin: admin.offsets(group, [topic]))
    return {
        q.queue_id: q.max_queue_offset - (q.committed_queue_offset or q.min_queue_offset)
        for q in offsets.queues
        if q.topic == topic and not q.retry_of
    }


def lag_by_queue(
    access: ClusterAccess, brokers: list[Broker], group: str, topic: str
) -> dict[tuple[str, int], int]:
    return {
        (b.name, queue): n for b in brokers for queue, n in lag(access, b, group, topic).items()
    }


def in_flight(access: ClusterAccess, brokers_: list[Broker], group: str, topic: str) -> int:
    """Messages of ``topic`` popped by ``group`` and neither acked nor revived yet."""
    total = 0
    for broker in brokers_:
        offsets = call(access, broker, lambda admin: admin.offsets(group, [topic]))
        total += sum(q.in_flight_messages or 0 for q in offsets.queues if q.topic == topic)
    return total
