"""``BrokerAdmin``: the typed async client of one broker's admin API.

The operator, the audit jobs and the ``popfleet-admin`` CLI reach brokers only
through this module (DESIGN §2). ``BrokerAdminApi`` is the Protocol they depend
on, so their tests can use an in-memory implementation instead of a broker.

Behaviour callers rely on:

* every unary call has a deadline (``timeout_s``, default 10 s) and every scan
  one for the whole stream (``scan_timeout_s``, default 300 s);
* with a ``token`` every call carries ``authorization: Bearer <token>``;
* with ``proxy=None`` (the default) the channel ignores proxy settings in the environment
  and dials the broker directly; with ``proxy="http://HOST:PORT"`` every connection is an
  HTTP CONNECT tunnel through that proxy (see :func:`channel_options`);
* a failed call raises a :mod:`popfleet_api.errors` class (``retriable`` set
  for UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED) whose ``target`` is
  this broker; an unreachable broker is :class:`~popfleet_api.errors.Unavailable`;
* answers are :mod:`popfleet_api.models` values, never protobuf messages;
* scans yield pages; a caller that stops early (``break``) cancels the stream;
* ``scan_revive_log_batches`` yields the revive log as Arrow record batches
  (:mod:`popfleet_api.revivebatches`, needs ``pyarrow``) from ``ScanReviveLogBatches``;
  a broker that predates that RPC (UNIMPLEMENTED) or sends a batch format this client
  does not know gets ``ScanReviveLog`` instead, from where the batches stopped, and
  the client builds the same batches from its records. ``fallbacks`` counts those;
* ``topics(names=...)`` and ``groups(names=...)`` answer only the named objects
  (unknown names are absent; an empty ``names`` answers ``[]`` without a call).
  A broker that predates the request's ``names`` field answers everything; the
  client filters that answer, so the result is the same against either broker.

Use as ``async with BrokerAdmin("10.0.0.7:9877", token=...) as admin: ...``,
created inside the event loop that uses it (a grpc.aio channel belongs to one loop).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from popfleet_api import convert, errors, models

if TYPE_CHECKING:
    from popfleet_api import revivebatches
from popfleet_api.admin.v1 import admin_pb2 as pb
from popfleet_api.admin.v1 import admin_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from popfleet_api.admin.v1.admin_pb2_grpc import BrokerAdminAsyncStub

FALLBACK_PAGE_SIZE = 1024  # ScanReviveLog's largest page, for the batch fallback

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_SCAN_TIMEOUT_S = 300.0
SERVICE_NAME = "popfleet.admin.v1.BrokerAdmin"

CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
)


def channel_options(proxy: str | None) -> tuple[tuple[str, int | str], ...]:
    """The channel's options: with no ``proxy`` proxies are off, whatever the environment says.

    Brokers are reached on pod IPs or loopback, so an ``HTTP(S)_PROXY``/``grpc_proxy`` in a
    pod must not catch the calls. A caller that can only reach brokers through an HTTP
    CONNECT proxy (the kind e2e, from the host) names it: ``http://HOST:PORT``, passed as
    gRPC's ``grpc.http_proxy`` channel argument, which takes precedence over the
    environment's proxy variables. gRPC still honours ``no_grpc_proxy`` (else ``no_proxy``)
    from the environment for such a channel; a caller that must never bypass the proxy
    clears it (``e2e/kind/proxy_tunnel.py`` sets ``no_grpc_proxy`` to empty).
    """
    if proxy is None:
        return (*CHANNEL_OPTIONS, ("grpc.enable_http_proxy", 0))
    # gRPC dials the broker directly when it cannot use the proxy URL: refuse such a URL here.
    url = urllib.parse.urlsplit(proxy)
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme != "http" or not url.hostname or port is None or url.path not in ("", "/"):
        raise ValueError(f"proxy {proxy!r} is not http://HOST:PORT")
    return (*CHANNEL_OPTIONS, ("grpc.http_proxy", proxy))


_Resp = TypeVar("_Resp")


class BrokerAdminApi(Protocol):
    """One broker's admin API, as the operator and the audit jobs use it."""

    @property
    def target(self) -> str:
        """``HOST:PORT`` (or any gRPC target) of the broker's admin port."""
        ...

    async def info(self) -> models.BrokerInfo: ...

    async def set_members(self, members: Sequence[models.Member]) -> list[models.Member]:
        """Replace the cluster's member list; returns it as stored."""
        ...

    async def members(self) -> list[models.Member]: ...

    async def hand_over(self, successor: str = "", *, timeout_ms: int = 0) -> models.HandOverResult:
        """A replicated broker's leader hands its set over (``HandOver``; empty
        ``successor``: the in-sync follower furthest along); ``FailedPrecondition`` when
        replication is off or no follower fits, ``Unavailable`` when it does not lead or the
        successor did not catch up (nothing changed)."""
        ...

    async def put_topic(self, topic: models.Topic) -> models.PutTopicResult:
        """Create or update; shrinking a queue count raises ``FailedPrecondition``."""
        ...

    async def delete_topic(self, name: str) -> None: ...

    async def topics(
        self, *, include_system: bool = False, names: Collection[str] | None = None
    ) -> list[models.Topic]:
        """Sorted by name; with ``names`` only those (unknown ones absent), see the module."""
        ...

    async def put_group(self, group: models.Group) -> models.PutGroupResult: ...

    async def delete_group(self, name: str) -> None: ...

    async def groups(self, *, names: Collection[str] | None = None) -> list[models.Group]:
        """Sorted by name; with ``names`` only those (unknown ones absent), see the module."""
        ...

    async def set_consume_mode(
        self,
        group: str,
        topic: str,
        *,
        mode: models.ConsumeMode,
        pop_share_queue_num: int = 0,
    ) -> models.ConsumeModeSetting: ...

    async def consume_mode(self, group: str, topic: str) -> models.ConsumeModeSetting: ...

    async def consume_modes(self, group: str | None = None) -> list[models.ConsumeModeSetting]: ...

    async def offsets(self, group: str, topics: Sequence[str] = ()) -> models.GroupOffsets: ...

    async def revive_stats(self) -> models.ReviveStats: ...

    def scan_revive_log(
        self,
        revive_queue_id: int,
        *,
        from_queue_offset: int = 0,
        page_size: int = 0,
        max_records: int = 0,
    ) -> AsyncIterator[models.ReviveLogPage]: ...

    def scan_revive_log_batches(
        self,
        revive_queue_id: int,
        *,
        from_queue_offset: int = 0,
        batch_records: int = 0,
        max_records: int = 0,
    ) -> AsyncIterator[revivebatches.ReviveLogBatch]:
        """The revive log as Arrow batches, whatever the broker's version (module docstring)."""
        ...

    def scan_offsets(
        self,
        *,
        group: str | None = None,
        start_after: models.OffsetTableKey | None = None,
        page_size: int = 0,
        include_store_times: bool = False,
    ) -> AsyncIterator[models.OffsetTablePage]: ...

    async def serving(self) -> bool:
        """True when ``grpc.health.v1`` says the admin service is SERVING."""
        ...

    async def close(self) -> None: ...


def _reason(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == errors.REASON_METADATA_KEY:
            return str(value)
    return ""


class BrokerAdmin:
    """:class:`BrokerAdminApi` over a grpc.aio channel (see the module docstring)."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        scan_timeout_s: float = DEFAULT_SCAN_TIMEOUT_S,
        proxy: str | None = None,
    ) -> None:
        if timeout_s <= 0 or scan_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        self._target = target
        self._timeout_s = timeout_s
        self._scan_timeout_s = scan_timeout_s
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self._channel = grpc.aio.insecure_channel(target, options=channel_options(proxy))
        self._stub: BrokerAdminAsyncStub = pb_grpc.BrokerAdminStub(self._channel)  # type: ignore[assignment]
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self.fallbacks = 0  # batch scans served by ScanReviveLog (an older broker)

    @property
    def target(self) -> str:
        return self._target

    async def __aenter__(self) -> BrokerAdmin:
        return self

    async def __aexit__(self, *_exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    # ------------------------------------------------------------------ plumbing

    def _error(self, exc: grpc.aio.AioRpcError) -> errors.AdminError:
        code = exc.code()
        name = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
        return errors.from_status(
            name,
            exc.details() or "",
            reason=_reason(exc.trailing_metadata()),
            target=self._target,
        )

    async def _call(self, method: Any, request: Any, *, timeout_s: float | None = None) -> Any:
        try:
            return await method(
                request, timeout=timeout_s or self._timeout_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from None

    # ------------------------------------------------------------------ broker and members

    async def info(self) -> models.BrokerInfo:
        answer = await self._call(self._stub.GetBrokerInfo, pb.GetBrokerInfoRequest())
        return convert.broker_info_from_pb(answer)

    async def set_members(self, members: Sequence[models.Member]) -> list[models.Member]:
        request = pb.SetMembersRequest(members=[convert.member_to_pb(m) for m in members])
        answer = await self._call(self._stub.SetMembers, request)
        return [convert.member_from_pb(m) for m in answer.members]

    async def members(self) -> list[models.Member]:
        answer = await self._call(self._stub.GetMembers, pb.GetMembersRequest())
        return [convert.member_from_pb(m) for m in answer.members]

    async def hand_over(self, successor: str = "", *, timeout_ms: int = 0) -> models.HandOverResult:
        request = pb.HandOverRequest(successor=successor, timeout_ms=timeout_ms)
        # the leader waits for its successor: the call's deadline covers that wait
        timeout_s = self._timeout_s + (timeout_ms or 10_000) / 1000
        answer = await self._call(self._stub.HandOver, request, timeout_s=timeout_s)
        return models.HandOverResult(successor=answer.successor, term=answer.term)

    # ------------------------------------------------------------------ topics and groups

    async def put_topic(self, topic: models.Topic) -> models.PutTopicResult:
        request = pb.PutTopicRequest(topic=convert.topic_to_pb(topic))
        answer = await self._call(self._stub.PutTopic, request)
        return models.PutTopicResult(
            topic=convert.topic_from_pb(answer.topic), created=answer.created
        )

    async def delete_topic(self, name: str) -> None:
        await self._call(self._stub.DeleteTopic, pb.DeleteTopicRequest(name=name))

    async def topics(
        self, *, include_system: bool = False, names: Collection[str] | None = None
    ) -> list[models.Topic]:
        if names is not None and not names:
            return []
        request = pb.ListTopicsRequest(include_system=include_system, names=sorted(names or ()))
        answer = await self._call(self._stub.ListTopics, request)
        return [
            convert.topic_from_pb(t)
            for t in answer.topics
            if names is None or t.name in names  # an older broker answers every topic
        ]

    async def put_group(self, group: models.Group) -> models.PutGroupResult:
        request = pb.PutGroupRequest(group=convert.group_to_pb(group))
        answer = await self._call(self._stub.PutGroup, request)
        return models.PutGroupResult(
            group=convert.group_from_pb(answer.group), created=answer.created
        )

    async def delete_group(self, name: str) -> None:
        await self._call(self._stub.DeleteGroup, pb.DeleteGroupRequest(name=name))

    async def groups(self, *, names: Collection[str] | None = None) -> list[models.Group]:
        if names is not None and not names:
            return []
        request = pb.ListGroupsRequest(names=sorted(names or ()))
        answer = await self._call(self._stub.ListGroups, request)
        return [
            convert.group_from_pb(g)
            for g in answer.groups
            if names is None or g.name in names  # an older broker answers every group
        ]

    # ------------------------------------------------------------------ consume modes

    async def set_consume_mode(
        self,
        group: str,
        topic: str,
        *,
        mode: models.ConsumeMode,
        pop_share_queue_num: int = 0,
    ) -> models.ConsumeModeSetting:
        with convert.refusing_bad_values("consume mode"):
            request = pb.SetConsumeModeRequest(
                group=group,
                topic=topic,
                mode=convert.consume_mode_to_pb(mode),
                pop_share_queue_num=pop_share_queue_num,
            )
        answer = await self._call(self._stub.SetConsumeMode, request)
        return convert.consume_mode_setting_from_pb(answer)

    async def consume_mode(self, group: str, topic: str) -> models.ConsumeModeSetting:
        request = pb.GetConsumeModeRequest(group=group, topic=topic)
        answer = await self._call(self._stub.GetConsumeMode, request)
        return convert.consume_mode_setting_from_pb(answer)

    async def consume_modes(self, group: str | None = None) -> list[models.ConsumeModeSetting]:
        request = pb.ListConsumeModesRequest(group=group)
        answer = await self._call(self._stub.ListConsumeModes, request)
        return [convert.consume_mode_setting_from_pb(m) for m in answer.modes]

    # ------------------------------------------------------------------ offsets and revive

    async def offsets(self, group: str, topics: Sequence[str] = ()) -> models.GroupOffsets:
        request = pb.GetOffsetsRequest(group=group, topics=list(topics))
        answer = await self._call(self._stub.GetOffsets, request)
        return convert.group_offsets_from_pb(answer)

    async def revive_stats(self) -> models.ReviveStats:
        answer = await self._call(self._stub.GetReviveStats, pb.GetReviveStatsRequest())
        return convert.revive_stats_from_pb(answer)

    # ------------------------------------------------------------------ scans

    async def scan_revive_log(
        self,
        revive_queue_id: int,
        *,
        from_queue_offset: int = 0,
        page_size: int = 0,
        max_records: int = 0,
    ) -> AsyncIterator[models.ReviveLogPage]:
        with convert.refusing_bad_values("revive log scan"):
            request = pb.ScanReviveLogRequest(
                revive_queue_id=revive_queue_id,
                from_queue_offset=from_queue_offset,
                page_size=page_size,
                max_records=max_records,
            )
        call = self._stub.ScanReviveLog(
            request, timeout=self._scan_timeout_s, metadata=self._metadata
        )
        async for page in self._stream(call):
            yield convert.revive_log_page_from_pb(page)

    async def scan_revive_log_batches(
        self,
        revive_queue_id: int,
        *,
        from_queue_offset: int = 0,
        batch_records: int = 0,
        max_records: int = 0,
    ) -> AsyncIterator[revivebatches.ReviveLogBatch]:
        from popfleet_api import revivebatches  # noqa: PLC0415 - pyarrow only for batch readers

        with convert.refusing_bad_values("revive log batch scan"):
            request = pb.ScanReviveLogBatchesRequest(
                revive_queue_id=revive_queue_id,
                from_queue_offset=from_queue_offset,
                batch_records=batch_records,
                max_records=max_records,
            )
        position, left = from_queue_offset, max_records
        call = self._stub.ScanReviveLogBatches(
            request, timeout=self._scan_timeout_s, metadata=self._metadata
        )
        try:
            async for message in self._stream(call):
                if message.format != pb.REVIVE_BATCH_FORMAT_ARROW_IPC_V1:
                    break  # a format we do not know: read the rest record by record
                batch = convert.revive_log_batch_from_pb(message, target=self._target)
                position = batch.next_queue_offset
                if max_records:
                    left -= batch.records.num_rows
                yield batch
            else:
                return
        except errors.Unimplemented:
            pass  # an older broker: read record by record
        finally:
            call.cancel()
        if max_records and left <= 0:
            return
        self.fallbacks += 1
        async for page in self.scan_revive_log(
            revive_queue_id,
            from_queue_offset=position,
            page_size=FALLBACK_PAGE_SIZE,
            max_records=left if max_records else 0,
        ):
            yield revivebatches.ReviveLogBatch(
                revive_queue_id=page.revive_queue_id,
                records=revivebatches.batch_from_records(page.records),
                next_queue_offset=page.next_queue_offset,
                min_queue_offset=page.min_queue_offset,
                max_queue_offset=page.max_queue_offset,
                end_of_log=page.end_of_log,
            )

    async def scan_offsets(
        self,
        *,
        group: str | None = None,
        start_after: models.OffsetTableKey | None = None,
        page_size: int = 0,
        include_store_times: bool = False,
    ) -> AsyncIterator[models.OffsetTablePage]:
        with convert.refusing_bad_values("offset table scan"):
            request = pb.ScanOffsetsRequest(
                group=group,
                start_after=(convert.offset_table_key_to_pb(start_after) if start_after else None),
                page_size=page_size,
                include_store_times=include_store_times,
            )
        call = self._stub.ScanOffsets(
            request, timeout=self._scan_timeout_s, metadata=self._metadata
        )
        async for page in self._stream(call):
            yield convert.offset_table_page_from_pb(page)

    async def _stream(self, call: Any) -> AsyncIterator[Any]:
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from None
        finally:
            call.cancel()

    # ------------------------------------------------------------------ health

    async def serving(self) -> bool:
        try:
            answer = await self._health.Check(
                health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=self._timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from None
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)
