"""Routes (QueryRoute) and broker-side assignments (QueryAssignment).

Routes (DESIGN §3.6): every member of the cluster serves the same topics (the
operator creates them on every broker), so a route lists, for each member,
the topic's queues with that member's advertised endpoint. A broker whose
store knows no members is a one-member cluster advertising itself. Queue
permissions follow the proxy: the first ``min(read, write)`` queues are
read-write, the surplus read-only or write-only, all masked by the topic's
permission. Accepted message kinds come from the topic's message type.

Assignments (DESIGN §3.3): the queues of every member, given to the group's
live clients with :func:`popbroker.pop.assignment.assign` under the
group/topic's consume mode (PULL: exclusive; POP: ``allocate4Pop``, queue -1
meaning "every queue of that broker"). Consume modes come from the role's
:class:`ConfigCache` with the rest of the configuration, so an answer is at most
its TTL stale after an admin ``set-mode``.

Held queues: a push consumer receives by the queue ids of its last
assignment, and its receives stay parked for a whole long poll. After a
rebalance (a mode switch, a client joining or leaving) such a receive would
still pop a queue that is now another consumer's, which breaks PULL's
exclusivity. :meth:`Router.holds` answers whether the client's *current*
assignment covers a queue of this broker (a specific queue is covered by
itself or by -1; -1 only by -1); :meth:`Router.guarded` attaches that check
to a push consumer's receive, which re-checks it before every pop attempt.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from popbroker.pop import assignment
from popbroker.services.clients import ClientRegistry
from popbroker.services.configcache import ConfigCache
from popbroker.services.messages import MessageKind
from popbroker.services.receiving import ReceiveRequest
from popbroker.services.sending import accepted_kinds
from popbroker.store.api import Permission, TopicConfig


@dataclass(frozen=True, slots=True)
class Endpoint:
    """``host:port`` of a broker's client endpoint."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"endpoint {text!r} is not HOST:PORT")
        return cls(host.strip("[]"), int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class RouteQueue:
    """One queue of a route."""

    topic: str
    broker_name: str
    endpoint: Endpoint
    queue_id: int  # -1 in an assignment: every queue of that broker
    perm: Permission
    accepted: frozenset[MessageKind]


def queue_permissions(topic: TopicConfig) -> list[Permission]:
    """Per queue id: READ_WRITE for the common ones, READ or WRITE for the surplus."""
    perms: list[Permission] = []
    for queue_id in range(topic.queue_nums):
        bits = 0
        if queue_id < topic.read_queue_nums:
            bits |= Permission.READ
        if queue_id < topic.write_queue_nums:
            bits |= Permission.WRITE
        perms.append(Permission(bits & topic.perm))
    return perms


class Router:
    """Routes and assignments of one broker."""

    def __init__(
        self,
        *,
        config: ConfigCache,
        broker_name: str,
        advertised: Endpoint,
    ) -> None:
        self._config = config
        self._broker_name = broker_name
        self._advertised = advertised

    async def members(self) -> list[tuple[str, Endpoint]]:
        """``(broker name, endpoint)`` of every member, this broker included."""
        members = [
            (m.broker_name, Endpoint.parse(m.endpoint)) for m in await self._config.members()
        ]
        if not any(name == self._broker_name for name, _ in members):
            members.append((self._broker_name, self._advertised))
        return sorted(members, key=lambda member: member[0])

    async def route(self, topic_name: str) -> list[RouteQueue]:
        """The route of a user topic (raises TopicNotFound)."""
        topic = await self._config.topic(topic_name)
        accepted = accepted_kinds(topic.message_type)
        perms = queue_permissions(topic)
        return [
            RouteQueue(topic.name, name, endpoint, queue_id, perm, accepted)
            for name, endpoint in await self.members()
            for queue_id, perm in enumerate(perms)
        ]

    async def assignment(
        self, *, topic_name: str, group: str, client_id: str, clients: ClientRegistry
    ) -> list[RouteQueue]:
        """The queues ``client_id`` of ``group`` should consume (raises Topic/GroupNotFound)."""
        await self._config.group(group)
        route = [q for q in await self.route(topic_name) if q.perm & Permission.READ]
        mode = await self._config.consume_mode(group=group, topic=topic_name)
        live = clients.live_clients(group)
        if client_id not in live:
            live = sorted({*live, client_id})  # a client asking is alive, heartbeat or not
        assigned = assignment.assign(
            client_id,
            queues=[assignment.MessageQueue(q.broker_name, q.queue_id) for q in route],
            client_ids=live,
            mode=assignment.ConsumeMode(mode.mode.value),
            pop_share_queue_num=mode.pop_share_queue_num,
        )
        template = {q.broker_name: q for q in route}
        by_id = {(q.broker_name, q.queue_id): q for q in route}
        result: list[RouteQueue] = []
        for queue in assigned:
            found = by_id.get((queue.broker_name, queue.queue_id))
            if found is None:
                base = template[queue.broker_name]
                found = RouteQueue(
                    base.topic,
                    base.broker_name,
                    base.endpoint,
                    queue.queue_id,
                    Permission.READ_WRITE,
                    base.accepted,
                )
            result.append(found)
        return result

    async def holds(
        self, *, topic_name: str, group: str, client_id: str, queue_id: int, clients: ClientRegistry
    ) -> bool:
        """Whether ``client_id``'s current assignment covers ``queue_id`` of this broker."""
        assigned = await self.assignment(
            topic_name=topic_name, group=group, client_id=client_id, clients=clients
        )
        mine = {q.queue_id for q in assigned if q.broker_name == self._broker_name}
        return queue_id in mine or (queue_id >= 0 and assignment.ALL_QUEUES in mine)

    def guarded(
        self, request: ReceiveRequest, *, client_id: str, clients: ClientRegistry
    ) -> ReceiveRequest:
        """A push consumer's ``request``, re-checking before each pop that it holds its queue."""
        check = functools.partial(
            self.holds,
            topic_name=request.topic,
            group=request.group,
            client_id=client_id,
            queue_id=request.queue_id,
            clients=clients,
        )
        return dataclasses.replace(request, still_assigned=check)
