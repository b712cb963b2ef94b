"""The ``popfleet.admin.v1.BrokerAdmin`` RPCs over one ``StoreApi``.

Each RPC, as numbered steps:

  1. Convert and validate the request (:mod:`popbroker.admin.convert`); a bad
     field ends the call with INVALID_ARGUMENT before anything is read.
  2. Check it against the current state: unknown names are NOT_FOUND, shrinking
     queues and deleting system topics FAILED_PRECONDITION.
  3. Only then change the store. Changes to one config object (a topic, a
     group, the member list; a consume mode holds its group's and its topic's)
     run one at a time under that object's lock, so steps 2 and 3 see the same
     state (the store checks again, atomically, and its errors map through
     :mod:`popbroker.admin.errors`). Changes to different objects run
     concurrently, so their config-file writes are shared (the store
     group-commits them, see :mod:`popbroker.store.local`).

A refusal therefore always means "nothing changed". Any other exception is
logged here and answered INTERNAL: bad input never crashes the role. Every
answered call is counted in ``popfleet_admin_requests_total``
(:mod:`popbroker.metrics.admin`) when metrics are on.

Reads of one object are O(1) on the store (:class:`AdminStore`): the operator
reads each Topic, ConsumerGroup and consume mode by name (``ListTopics`` and
``ListGroups`` with ``names``, ``GetConsumeMode``), so its per-object work does
not grow with the number of objects on the broker.

Callers: :mod:`popbroker.admin.server`.
"""

# ruff: noqa: N802 -- servicer methods carry the gRPC method names

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

import grpc

from popbroker import __version__
from popbroker.admin import convert, scanning
from popbroker.admin.errors import (
    REASON_METADATA_KEY,
    AdminRefusal,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    status_of_store_error,
)
from popbroker.inspect import inspecting
from popbroker.inspect.popstate import PopStateProvider
from popbroker.metrics.admin import AdminMetrics
from popbroker.replication.handover import HandOverRefused
from popbroker.store import names
from popbroker.store.api import ConsumeModeConfig, GroupConfig, TopicConfig
from popbroker.store.errors import StoreError
from popfleet_api.admin.v1 import admin_pb2 as pb
from popfleet_api.admin.v1 import admin_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

Clock = Callable[[], int]
_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Self = TypeVar("_Self", bound="AdminServicer")


class AdminStore(scanning.ColumnStore, Protocol):
    """The store as the admin API uses it: ``StoreApi`` plus O(1) reads of one object and
    bulk reads (``read_columns``).

    ``LocalStore`` is one: the admin server runs in the process that owns the store.
    """

    async def topic(self, name: str) -> TopicConfig | None: ...

    async def group(self, name: str) -> GroupConfig | None: ...

    async def consume_mode(self, *, group: str, topic: str) -> ConsumeModeConfig | None: ...


class ObjectLocks:
    """One asyncio lock per config object key, kept only while someone holds or awaits it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def holding(self, keys: Iterable[str]) -> AsyncIterator[None]:
        """Hold every key's lock (taken in sorted order, so two holders never deadlock)."""
        ordered = sorted(set(keys))
        for key in ordered:
            lock, users = self._locks.get(key, (asyncio.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        taken: list[asyncio.Lock] = []
        try:
            for key in ordered:
                lock = self._locks[key][0]
                await lock.acquire()
                taken.append(lock)
            yield
        finally:
            for lock in reversed(taken):
                lock.release()
            for key in ordered:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


def _topic_key(name: str) -> str:
    return f"topic/{name}"


def _group_key(name: str) -> str:
    return f"group/{name}"


MEMBERS_KEY = "members"
HAND_OVER_TIMEOUT_MS = 10_000  # HandOver's wait for its successor when the caller gives none


def _status_of(method: str, exc: BaseException) -> tuple[grpc.StatusCode, str, str]:
    if isinstance(exc, AdminRefusal):
        return exc.code, exc.reason, exc.message
    if isinstance(exc, HandOverRefused):
        code = grpc.StatusCode.UNAVAILABLE
        if not exc.retriable and exc.reason != "NOT_LEADER":
            code = grpc.StatusCode.FAILED_PRECONDITION
        return code, exc.reason, exc.message
    if isinstance(exc, StoreError):
        code, reason = status_of_store_error(exc)
        return code, reason, str(exc)
    log.error("admin: %s failed unexpectedly", method, exc_info=exc)
    return grpc.StatusCode.INTERNAL, "INTERNAL", f"internal error in {method}: {type(exc).__name__}"


async def _abort(
    servicer: AdminServicer, context: grpc.aio.ServicerContext, *, method: str, exc: BaseException
) -> None:
    code, reason, message = _status_of(method, exc)
    servicer.count(method, code.name)
    await context.abort(code, message, trailing_metadata=((REASON_METADATA_KEY, reason),))


def _answering(
    method: Callable[[_Self, _Req, Any], Awaitable[_Resp]],
) -> Callable[[_Self, _Req, Any], Awaitable[_Resp]]:
    """Wrap a unary RPC so every failure becomes a status (see the module docstring)."""

    @functools.wraps(method)
    async def wrapper(self: _Self, request: _Req, context: grpc.aio.ServicerContext) -> _Resp:
        try:
            answer = await method(self, request, context)
        except Exception as exc:  # noqa: BLE001 -- the edge: refusals, store errors, bugs
            failure: Exception = exc
        else:
            self.count(method.__name__, "OK")
            return answer
        await _abort(self, context, method=method.__name__, exc=failure)
        raise AssertionError("context.abort returned")  # pragma: no cover

    return wrapper


def _streaming(
    method: Callable[[_Self, _Req, Any], AsyncIterator[_Resp]],
) -> Callable[[_Self, _Req, Any], AsyncIterator[_Resp]]:
    """Wrap a server-streaming RPC so every failure becomes a status."""

    @functools.wraps(method)
    async def wrapper(
        self: _Self, request: _Req, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[_Resp]:
        try:
            async for item in method(self, request, context):
                yield item
        except Exception as exc:  # noqa: BLE001 -- the edge: refusals, store errors, bugs
            failure: Exception = exc
        else:
            self.count(method.__name__, "OK")
            return
        await _abort(self, context, method=method.__name__, exc=failure)

    return wrapper


class AdminServicer(pb_grpc.BrokerAdminServicer):
    """``BrokerAdmin`` over a store (see the module docstring)."""

    def __init__(
        self,
        store: AdminStore,
        *,
        pop_state: PopStateProvider,
        clock: Clock,
        client_endpoint: str | None = None,
        ready: Callable[[], bool] | None = None,
        metrics: AdminMetrics | None = None,
    ) -> None:
        self._store = store
        self._pop_state = pop_state
        self._clock = clock
        self._client_endpoint = client_endpoint
        self._ready = ready
        self._metrics = metrics
        self._config_locks = ObjectLocks()

    def count(self, method: str, code: str) -> None:
        """One answered call, in ``popfleet_admin_requests_total`` when metrics are on."""
        if self._metrics is not None:
            self._metrics.count(method, code)

    # ------------------------------------------------------------------ broker and members

    @_answering
    async def GetBrokerInfo(
        self, request: pb.GetBrokerInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.BrokerInfo:
        info = await self._store.info()
        revive = await self._store.topic(names.revive_topic(info.cluster))
        endpoint = self._client_endpoint
        if endpoint is None:
            mine = [m for m in await self._store.members() if m.broker_name == info.broker_name]
            endpoint = mine[0].endpoint if mine else ""
        ready = info.writable and (self._ready is None or self._ready())
        return pb.BrokerInfo(
            version=__version__,
            cluster=info.cluster,
            broker_name=info.broker_name,
            ready=ready,
            config_epoch=info.config_epoch,
            client_endpoint=endpoint,
            flush_mode=pb.FlushMode.ValueType(convert.FLUSH_MODE_TO_PB[info.flush_mode]),
            revive_queue_num=revive.queue_nums if revive else 0,
            last_error=info.last_error,
            now_ms=self._clock(),
        )

    @_answering
    async def SetMembers(
        self, request: pb.SetMembersRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetMembersResponse:
        members = convert.members_from_pb(request.members)
        async with self._config_locks.holding([MEMBERS_KEY]):
            await self._store.set_members(members)
            stored = await self._store.members()
        return pb.SetMembersResponse(members=[convert.member_to_pb(m) for m in stored])

    @_answering
    async def GetMembers(
        self, request: pb.GetMembersRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMembersResponse:
        members = await self._store.members()
        return pb.GetMembersResponse(members=[convert.member_to_pb(m) for m in members])

    # ------------------------------------------------------------------ topics

    @_answering
    async def PutTopic(
        self, request: pb.PutTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutTopicResponse:
        if not request.HasField("topic"):
            raise InvalidArgument("topic: missing", reason="MISSING_FIELD")
        wanted = convert.topic_from_pb(request.topic)
        async with self._config_locks.holding([_topic_key(wanted.name)]):
            current = await self._store.topic(wanted.name)
            if current is not None:
                convert.check_no_shrink(current, wanted)
            stored = await self._store.put_topic(wanted)
        return pb.PutTopicResponse(topic=convert.topic_to_pb(stored), created=current is None)

    @_answering
    async def DeleteTopic(
        self, request: pb.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicResponse:
        async with self._config_locks.holding([_topic_key(request.name)]):
            if await self._store.topic(request.name) is None:
                raise NotFound(f"topic {request.name!r} does not exist", reason="UNKNOWN_TOPIC")
            if names.is_system_topic(request.name):
                raise FailedPrecondition(
                    f"system topic {request.name!r} cannot be deleted", reason="SYSTEM_TOPIC"
                )
            await self._store.delete_topic(request.name)
        return pb.DeleteTopicResponse()

    @_answering
    async def ListTopics(
        self, request: pb.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTopicsResponse:
        if request.names:
            found = [await self._store.topic(name) for name in sorted(set(request.names))]
            topics = [t for t in found if t is not None]
        else:
            topics = sorted(await self._store.topics(), key=lambda t: t.name)
        return pb.ListTopicsResponse(
            topics=[
                convert.topic_to_pb(t)
                for t in topics
                if request.include_system or not names.is_system_topic(t.name)
            ]
        )

    # ------------------------------------------------------------------ groups

    @_answering
    async def PutGroup(
        self, request: pb.PutGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutGroupResponse:
        if not request.HasField("group"):
            raise InvalidArgument("group: missing", reason="MISSING_FIELD")
        wanted = convert.group_from_pb(request.group)
        async with self._config_locks.holding([_group_key(wanted.name)]):
            existed = await self._store.group(wanted.name) is not None
            stored = await self._store.put_group(wanted)
        return pb.PutGroupResponse(group=convert.group_to_pb(stored), created=not existed)

    @_answering
    async def DeleteGroup(
        self, request: pb.DeleteGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGroupResponse:
        async with self._config_locks.holding([_group_key(request.name)]):
            await self._require_group(request.name)
            await self._store.delete_group(request.name)
        return pb.DeleteGroupResponse()

    @_answering
    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGroupsResponse:
        if request.names:
            found = [await self._store.group(name) for name in sorted(set(request.names))]
            groups = [g for g in found if g is not None]
        else:
            groups = sorted(await self._store.groups(), key=lambda g: g.name)
        return pb.ListGroupsResponse(groups=[convert.group_to_pb(g) for g in groups])

    async def _require_group(self, name: str) -> None:
        if await self._store.group(name) is None:
            raise NotFound(f"group {name!r} does not exist", reason="UNKNOWN_GROUP")

    async def _require_user_topic(self, name: str) -> None:
        if names.is_system_topic(name) or await self._store.topic(name) is None:
            raise NotFound(f"topic {name!r} does not exist", reason="UNKNOWN_TOPIC")

    # ------------------------------------------------------------------ consume modes

    @_answering
    async def SetConsumeMode(
        self, request: pb.SetConsumeModeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumeModeSetting:
        wanted = convert.consume_mode_from_pb(request)
        keys = [_group_key(wanted.group), _topic_key(wanted.topic)]
        async with self._config_locks.holding(keys):
            await self._require_group(wanted.group)
            await self._require_user_topic(wanted.topic)
            stored = await self._store.put_consume_mode(wanted)
        return convert.consume_mode_to_pb(stored, explicitly_set=True)

    @_answering
    async def GetConsumeMode(
        self, request: pb.GetConsumeModeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumeModeSetting:
        convert.check_name(request.group, kind="group")
        convert.check_name(request.topic, kind="topic")
        await self._require_group(request.group)
        await self._require_user_topic(request.topic)
        mode = await self._store.consume_mode(group=request.group, topic=request.topic)
        if mode is not None:
            return convert.consume_mode_to_pb(mode, explicitly_set=True)
        default = ConsumeModeConfig(group=request.group, topic=request.topic)
        return convert.consume_mode_to_pb(default, explicitly_set=False)

    @_answering
    async def ListConsumeModes(
        self, request: pb.ListConsumeModesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListConsumeModesResponse:
        group = request.group if request.HasField("group") else None
        if group is not None:
            convert.check_name(group, kind="group")
            await self._require_group(group)
        modes = sorted(await self._store.consume_modes(), key=lambda m: (m.group, m.topic))
        return pb.ListConsumeModesResponse(
            modes=[
                convert.consume_mode_to_pb(m, explicitly_set=True)
                for m in modes
                if group is None or m.group == group
            ]
        )

    # ------------------------------------------------------------------ offsets and revive

    @_answering
    async def GetOffsets(
        self, request: pb.GetOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetOffsetsResponse:
        offsets = await inspecting.group_offsets(
            self._store,
            self._pop_state,
            group=convert.check_name(request.group, kind="group"),
            topics=list(request.topics),
            now_ms=self._clock(),
        )
        return convert.group_offsets_to_pb(offsets)

    @_answering
    async def GetReviveStats(
        self, request: pb.GetReviveStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetReviveStatsResponse:
        info = await self._store.info()
        stats = await inspecting.revive_stats(
            self._store, self._pop_state, cluster=info.cluster, now_ms=self._clock()
        )
        return convert.revive_stats_to_pb(stats)

    # ------------------------------------------------------------------ scans

    @_streaming
    async def ScanReviveLog(
        self, request: pb.ScanReviveLogRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReviveLogPage]:
        info = await self._store.info()
        async for page in scanning.revive_log_pages(
            self._store, cluster=info.cluster, request=request
        ):
            yield page

    @_streaming
    async def ScanReviveLogBatches(
        self, request: pb.ScanReviveLogBatchesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReviveLogBatch]:
        info = await self._store.info()
        async for batch in scanning.revive_log_batches(
            self._store, cluster=info.cluster, request=request
        ):
            yield batch

    @_streaming
    async def ScanOffsets(
        self, request: pb.ScanOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.OffsetTablePage]:
        async for page in scanning.offset_table_pages(
            self._store, self._pop_state, request=request
        ):
            yield page

    # ------------------------------------------------------------------ replication

    @_answering
    async def HandOver(
        self, request: pb.HandOverRequest, context: grpc.aio.ServicerContext
    ) -> pb.HandOverResponse:
        hand_over = getattr(self._store, "hand_over", None)  # a replica's store has it
        if hand_over is None:
            raise FailedPrecondition(
                "replication is off on this broker: there is no set to hand over",
                reason="REPLICATION_OFF",
            )
        timeout_s = (request.timeout_ms or HAND_OVER_TIMEOUT_MS) / 1000
        successor, term = await hand_over(request.successor or None, timeout_s=timeout_s)
        return pb.HandOverResponse(successor=successor, term=term)
