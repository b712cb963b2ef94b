"""``RemoteStore``: the ``StoreApi`` of a store in another process, over gRPC.

Used by the ``popack`` and ``revive`` roles when they run apart from the
``store`` role (DESIGN §3); ``popbroker all`` uses ``LocalStore`` directly.
The same contract suite runs against both (``tests/integration/store``).

Behaviour the callers rely on:

* every unary call has a deadline (``timeout_s``, default 10 s) and, by default,
  waits for the channel to become ready within that deadline, so a store that
  restarts in a few hundred milliseconds is invisible apart from latency;
* a failed call raises the ``StoreError`` subclass the store raised, with its
  message (``errormap``); a store that cannot be reached raises ``StoreClosed``
  (retriable). After a deadline an ``append`` may or may not have happened;
* ``arrivals()`` subscribes at once -- later calls through this client wait
  for the store to confirm it, so every later append is announced -- and
  reconnects when the stream breaks (store restart, socket gone), waiting
  ``RECONNECT_INITIAL_S`` doubling to ``RECONNECT_MAX_S``. Arrivals during a
  gap are not replayed: they are wake-up hints, and long polling has its own
  timeout. Details in ``popbroker.store.wire.arrivals``.

``RemoteStore.connect(target)`` takes a gRPC target: ``unix:/abs/path.sock`` in
a pod, ``HOST:PORT`` for the pod IP.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import grpc
from google.protobuf.message import Message

from popbroker.store import api, appending, errors
from popbroker.store import format as fmt
from popbroker.store.direct import DirectReads
from popbroker.store.wire import convert, errormap
from popbroker.store.wire import store_pb2 as pb
from popbroker.store.wire import store_pb2_grpc as pb_grpc
from popbroker.store.wire.arrivals import ArrivalStream
from popbroker.store.wire.frames import FrameChannel
from popbroker.store.wire.server import MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from popbroker.store.wire.store_pb2_grpc import StoreAsyncStub

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
RECONNECT_INITIAL_S = 0.05
RECONNECT_MAX_S = 2.0

CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # A store restart should be noticed in ~100 ms, not gRPC's default 1-120 s backoff.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", int(RECONNECT_MAX_S * 1000)),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.enable_http_proxy", 0),  # an HTTP(S)_PROXY in the pod must not catch pod-local calls
)

_Resp = TypeVar("_Resp")


def _error_name(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == errormap.ERROR_METADATA_KEY:
            return str(value)
    return None


def _to_store_error(exc: grpc.aio.AioRpcError) -> errors.StoreError:
    return errormap.error_from_status(
        exc.code(), exc.details() or "", _error_name(exc.trailing_metadata())
    )


READY_RETRY_S = 0.05  # wait_ready's pause after a call lost with its connection


class RemoteStore:
    """``StoreApi`` over a grpc.aio channel. Create with ``connect``; ``close`` when done."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        target: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        wait_for_ready: bool = True,
        frames_allowed: bool = True,
    ) -> None:
        self._channel = channel
        self._stub = cast("StoreAsyncStub", pb_grpc.StoreStub(channel))
        self._target = target
        self._timeout_s = timeout_s
        self._wait_for_ready = wait_for_ready
        self._streams: set[ArrivalStream] = set()
        self._direct: DirectReads | None = None
        self._frames_allowed = frames_allowed and target.startswith("unix:")
        self._frames: FrameChannel | None = None

    def read_directly(self, direct: DirectReads) -> None:
        """Answer ``read`` and ``bounds`` from the store's files through ``direct`` when it
        can (the same store's data directory: ``popbroker popack --data-dir``), else over
        the wire."""
        self._direct = direct

    @property
    def direct_reads(self) -> DirectReads | None:
        return self._direct

    @property
    def framed(self) -> bool:
        """Whether unary calls go to the store's framed socket (learnt in ``wait_ready``)."""
        return self._frames is not None

    @classmethod
    def connect(
        cls,
        target: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        wait_for_ready: bool = True,
        frames_allowed: bool = True,
    ) -> RemoteStore:
        """A client for the store at ``target``; the channel connects lazily on first use.

        Unary calls go over gRPC until ``wait_ready`` learns that the store serves framed
        calls beside its Unix socket (never for a TCP target, nor with ``frames_allowed``
        false); from then on they go there."""
        channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        return cls(
            channel,
            target=target,
            timeout_s=timeout_s,
            wait_for_ready=wait_for_ready,
            frames_allowed=frames_allowed,
        )

    @property
    def target(self) -> str:
        return self._target

    async def close(self) -> None:
        """Close the channel; open ``arrivals()`` iterators end."""
        streams, self._streams = self._streams, set()
        for stream in streams:
            await stream.aclose()
        if self._frames is not None:
            await self._frames.close()
        await self._channel.close()

    async def wait_ready(self, timeout_s: float) -> api.StoreInfo:
        """``info()`` once the store answers, waiting at most ``timeout_s`` for it to come up.

        ``wait_for_ready`` covers a store not listening yet; a call that went out on a
        connection the store was just closing (a restart) fails UNAVAILABLE, and is tried
        again until the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                response = await self._stub.Info(
                    pb.InfoRequest(),
                    timeout=max(deadline - loop.time(), 0.001),
                    wait_for_ready=True,
                )
                break
            except grpc.aio.AioRpcError as exc:
                left = deadline - loop.time()
                if exc.code() != grpc.StatusCode.UNAVAILABLE or left <= 0:
                    raise _to_store_error(exc) from None
                await asyncio.sleep(min(READY_RETRY_S, left))
        if self._frames_allowed and response.frames_socket and self._frames is None:
            socket_dir = Path(self._target.removeprefix("unix:")).parent
            self._frames = FrameChannel(socket_dir / Path(response.frames_socket).name)
        return convert.info_from_pb(response)

    async def _call(self, method: str, response: type[_Resp], request: Message) -> _Resp:
        """``method`` of the ``Store`` service: a framed call when the store serves them
        (``frames``), else gRPC; the same answer and the same errors either way."""
        timeout_s = self._timeout_s
        if any(not s.is_settled for s in self._streams):
            timeout_s = await self._wait_for_subscriptions()
        framed = self._frames
        if framed is not None:
            answer = await framed.call(
                method,
                request.SerializeToString(),
                timeout_s=timeout_s,
                wait=self._wait_for_ready,
            )
            return cast(_Resp, response.FromString(answer))  # type: ignore[attr-defined]
        rpc = getattr(self._stub, method)
        try:
            return cast(
                _Resp, await rpc(request, timeout=timeout_s, wait_for_ready=self._wait_for_ready)
            )
        except grpc.aio.AioRpcError as exc:
            raise _to_store_error(exc) from None

    async def _wait_for_subscriptions(self) -> float:
        """Hold a call until new arrival streams are confirmed; returns the time left for it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        pending = [s.settled() for s in self._streams if not s.is_settled]
        try:
            await asyncio.wait_for(asyncio.gather(*pending), self._timeout_s)
        except TimeoutError:
            raise errors.StoreClosed(
                f"store at {self._target} did not confirm an arrival subscription "
                f"within {self._timeout_s}s"
            ) from None
        return max(deadline - loop.time(), 0.001)

    # ------------------------------------------------------------ data path

    async def info(self) -> api.StoreInfo:
        return convert.info_from_pb(await self._call("Info", pb.StoreInfo, pb.InfoRequest()))

    async def append(self, messages: Sequence[api.MessageToAppend]) -> list[api.AppendResult]:
        """Encoded here as unplaced records (``appending``): the store only places them."""
        records = [appending.encode_unplaced(m) for m in messages]
        return await self._append_records(records, [m.topic for m in messages])

    async def append_records(self, records: Sequence[bytes]) -> list[api.AppendResult]:
        try:
            topics = [fmt.unplaced_topic(r) for r in records]
        except fmt.FormatError as exc:
            raise errors.InvalidArgument(f"not an unplaced record: {exc}") from None
        return await self._append_records(records, topics)

    async def _append_records(
        self, records: Sequence[bytes], topics: Sequence[str]
    ) -> list[api.AppendResult]:
        response = await self._call("Append", pb.AppendResponse, pb.AppendRequest(records=records))
        return convert.unpack_append_results(response.packed_results, topics)

    async def read(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int,
        tag_filter: str = "*",
        max_scan: int = 800,
    ) -> api.ReadResult:
        direct = self._direct
        stamp = None
        if direct is not None:
            if any(not s.is_settled for s in self._streams):
                # as for a call: an arrival subscription must be confirmed before a read
                # whose emptiness a long poll will wait on
                await self._wait_for_subscriptions()
            found = direct.read(
                topic,
                queue_id,
                queue_offset,
                max_count=max_count,
                tag_filter=tag_filter,
                max_scan=max_scan,
            )
            if found is not None:
                return found
            stamp = direct.config_stamp()  # before asking: what the answer is learned under
        with convert.refusing_bad_values("read"):
            request = pb.ReadRequest(
                topic=topic,
                queue_id=queue_id,
                queue_offset=queue_offset,
                max_count=max_count,
                tag_filter=tag_filter,
                max_scan=max_scan,
            )
        result = convert.read_result_from_pb(await self._call("Read", pb.ReadResponse, request))
        if direct is not None:
            direct.learn_absent(topic, queue_id, status=result.status, stamp=stamp)
        return result

    async def bounds(self, topic: str, queue_id: int) -> api.QueueBounds:
        direct = self._direct
        stamp = None
        if direct is not None:
            found = direct.bounds(topic, queue_id)
            if found is not None:
                return found
            stamp = direct.config_stamp()  # before asking: what the answer is learned under
        with convert.refusing_bad_values("bounds"):
            request = pb.BoundsRequest(topic=topic, queue_id=queue_id)
        try:
            bounds = convert.bounds_from_pb(await self._call("Bounds", pb.QueueBounds, request))
        except errors.UnknownTopic:
            if direct is not None:
                direct.learn_absent(
                    topic, queue_id, status=api.ReadStatus.NO_SUCH_QUEUE, stamp=stamp
                )
            raise
        if direct is not None and bounds.max_queue_offset == 0:  # what a read would call
            direct.learn_absent(
                topic, queue_id, status=api.ReadStatus.NO_MESSAGE_IN_QUEUE, stamp=stamp
            )
        return bounds

    def arrivals(self, topic: str | None = None) -> AsyncIterator[api.Arrival]:
        """Subscribe now (see ``arrivals.ArrivalStream``); calls made after this see it."""
        stream = ArrivalStream(
            self._stub,
            topic=topic,
            target=self._target,
            to_store_error=_to_store_error,
            initial_backoff_s=RECONNECT_INITIAL_S,
            max_backoff_s=RECONNECT_MAX_S,
        )
        self._streams = {s for s in self._streams if not s.is_closed}
        self._streams.add(stream)
        return stream

    # ------------------------------------------------------------ offsets

    async def commit_offset(
        self, *, group: str, topic: str, queue_id: int, queue_offset: int
    ) -> None:
        with convert.refusing_bad_values("commit_offset"):
            request = pb.CommitOffsetRequest(
                group=group, topic=topic, queue_id=queue_id, queue_offset=queue_offset
            )
        await self._call("CommitOffset", pb.CommitOffsetResponse, request)

    async def committed_offset(self, *, group: str, topic: str, queue_id: int) -> int | None:
        with convert.refusing_bad_values("committed_offset"):
            request = pb.CommittedOffsetRequest(group=group, topic=topic, queue_id=queue_id)
        response = await self._call("CommittedOffset", pb.CommittedOffsetResponse, request)
        return response.queue_offset if response.HasField("queue_offset") else None

    async def committed_offsets(self, group: str | None = None) -> list[api.CommittedOffset]:
        request = pb.CommittedOffsetsRequest(group=group)
        response = await self._call("CommittedOffsets", pb.CommittedOffsetsResponse, request)
        return [convert.committed_offset_from_pb(r) for r in response.offsets]

    async def delete_offsets(self, group: str, topic: str | None = None) -> None:
        await self._call(
            "DeleteOffsets",
            pb.DeleteOffsetsResponse,
            pb.DeleteOffsetsRequest(group=group, topic=topic),
        )

    # ------------------------------------------------------------ configuration

    async def put_topic(self, topic: api.TopicConfig) -> api.TopicConfig:
        request = pb.PutTopicRequest(topic=convert.topic_to_pb(topic))
        return convert.topic_from_pb(await self._call("PutTopic", pb.TopicConfig, request))

    async def delete_topic(self, name: str) -> None:
        await self._call("DeleteTopic", pb.DeleteTopicResponse, pb.DeleteTopicRequest(name=name))

    async def topics(self) -> list[api.TopicConfig]:
        response = await self._call("Topics", pb.TopicsResponse, pb.TopicsRequest())
        return [convert.topic_from_pb(t) for t in response.topics]

    async def put_group(self, group: api.GroupConfig) -> api.GroupConfig:
        request = pb.PutGroupRequest(group=convert.group_to_pb(group))
        return convert.group_from_pb(await self._call("PutGroup", pb.GroupConfig, request))

    async def delete_group(self, name: str) -> None:
        await self._call("DeleteGroup", pb.DeleteGroupResponse, pb.DeleteGroupRequest(name=name))

    async def groups(self) -> list[api.GroupConfig]:
        response = await self._call("Groups", pb.GroupsResponse, pb.GroupsRequest())
        return [convert.group_from_pb(g) for g in response.groups]

    async def put_consume_mode(self, mode: api.ConsumeModeConfig) -> api.ConsumeModeConfig:
        request = pb.PutConsumeModeRequest(mode=convert.consume_mode_to_pb(mode))
        return convert.consume_mode_from_pb(
            await self._call("PutConsumeMode", pb.ConsumeModeConfig, request)
        )

    async def consume_modes(self) -> list[api.ConsumeModeConfig]:
        response = await self._call(
            "ConsumeModes", pb.ConsumeModesResponse, pb.ConsumeModesRequest()
        )
        return [convert.consume_mode_from_pb(m) for m in response.modes]

    async def set_members(self, members: Sequence[api.ClusterMember]) -> None:
        request = pb.SetMembersRequest(members=[convert.member_to_pb(m) for m in members])
        await self._call("SetMembers", pb.SetMembersResponse, request)

    async def members(self) -> list[api.ClusterMember]:
        response = await self._call("Members", pb.MembersResponse, pb.MembersRequest())
        return [convert.member_from_pb(m) for m in response.members]
