"""popfront's framed v2 calls on the Python side (``popbroker.grpc.frontframes``): the
envelope, the interceptor chain run as grpc.aio runs it, the context handlers see, and what
a failure answers. The servicer here is a stand-in (our chain logic is under test); the
official clients run through the real one behind popfront in tests/integration/broker."""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popbroker.grpc import front, frontappends, frontframes
from popbroker.grpc.handlers import SERVICE_PREFIX
from popbroker.grpc.protocol import definition, service
from popbroker.store.wire import frames

SEND = SERVICE_PREFIX + "SendMessage"


def encode_envelope(
    request: bytes, *, metadata: list[tuple[str, str | bytes]], timeout_ms: int | None
) -> bytes:
    """A framed request's bytes as popfront writes them (frames.go's ``envelope``)."""
    timeout = frontframes.NO_TIMEOUT if timeout_ms is None else timeout_ms
    parts = [struct.pack(">IH", timeout, len(metadata))]
    for key, value in metadata:
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        parts += [struct.pack(">B", len(key)), key.encode(), struct.pack(">I", len(raw)), raw]
    parts.append(request)
    return b"".join(parts)


keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=20).filter(
    lambda k: not k.endswith("-bin")
)


@given(
    text=st.lists(st.tuples(keys, st.text(alphabet=st.characters(max_codepoint=255))), max_size=5),
    binary=st.lists(st.tuples(keys.map(lambda k: k + "-bin"), st.binary()), max_size=3),
    timeout_ms=st.one_of(st.none(), st.integers(0, frontframes.NO_TIMEOUT - 1)),
    request=st.binary(),
)
def test_the_envelope_round_trips(
    text: list[tuple[str, str]],
    binary: list[tuple[str, bytes]],
    timeout_ms: int | None,
    request: bytes,
) -> None:
    metadata: list[tuple[str, str | bytes]] = [*text, *binary]
    raw = encode_envelope(request, metadata=metadata, timeout_ms=timeout_ms)
    got, timeout_s, body = frontframes.parse_envelope(raw)
    assert list(got) == metadata
    assert timeout_s == (None if timeout_ms is None else timeout_ms / 1000)
    assert body == request


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x00\x00\x01",  # no metadata count
        struct.pack(">IH", 10, 1) + b"\x05ab",  # key cut short
        struct.pack(">IH", 10, 1) + b"\x01a" + struct.pack(">I", 9) + b"short",  # value cut
        struct.pack(">IH", 10, 1) + b"\x01\xff" + struct.pack(">I", 0),  # key not ASCII
    ],
)
def test_a_malformed_envelope_is_refused_as_invalid_argument(raw: bytes) -> None:
    with pytest.raises(frontframes.EnvelopeError):
        frontframes.parse_envelope(raw)
    code, payload = frontframes.failure(SEND, frontframes.EnvelopeError("bad"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert payload == b"\x00bad"


class Servicer:
    """Answers SendMessage with the client id it saw and the time left; ReceiveMessage
    with two responses."""

    def __init__(self) -> None:
        self.contexts: list[Any] = []

    async def SendMessage(self, request: Any, context: Any) -> Any:
        self.contexts.append(context)
        (client,) = [v for k, v in context.invocation_metadata() if k == "x-mq-client-id"]
        left = context.time_remaining()
        return service.SendMessageResponse(
            status={"message": f"{client} {request.messages[0].topic.name} {left is not None}"}
        )

    async def AckMessage(self, request: Any, context: Any) -> Any:
        raise RuntimeError("a bug")

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        return service.ChangeInvisibleDurationResponse(receipt_handle=request.receipt_handle)

    async def ReceiveMessage(self, request: Any, context: Any) -> Any:
        yield service.ReceiveMessageResponse(status={"message": request.group.name})
        yield service.ReceiveMessageResponse(status={"message": "second"})


class Recording:
    """An interceptor that records what it saw and passes the call on, as grpc.aio's do."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        self.seen.append(details.method)
        return await continuation(details)


def framed(servicer: Servicer, seen: list[str]) -> frontframes.FramedV2:
    return frontframes.FramedV2(
        frontframes.method_handlers(servicer), [front.FrontBatching(), Recording(seen)]
    )


def envelope(request: Any, timeout_ms: int | None = 5000) -> bytes:
    return encode_envelope(
        request.SerializeToString(),
        metadata=[("x-mq-client-id", "client-7"), ("user-agent", "test")],
        timeout_ms=timeout_ms,
    )


async def test_a_framed_call_runs_the_chain_and_the_servicer_with_the_clients_metadata() -> None:
    servicer, seen = Servicer(), list[str]()
    v2 = framed(servicer, seen)
    request = service.SendMessageRequest(messages=[{"topic": {"name": "orders"}}])
    answer = await v2.call(SEND, envelope(request))
    assert service.SendMessageResponse.FromString(answer).status.message == "client-7 orders True"
    no_deadline = await v2.call(SEND, envelope(request, timeout_ms=None))
    assert service.SendMessageResponse.FromString(no_deadline).status.message.endswith("False")
    assert seen == [SEND, SEND]
    assert not servicer.contexts[0].done()


async def test_the_batched_receive_is_seen_by_the_chain_as_receive_message() -> None:
    seen: list[str] = []
    v2 = framed(Servicer(), seen)
    request = service.ReceiveMessageRequest(group={"name": "billing"})
    answer = await v2.call(front.FRONT_RECEIVE, envelope(request))
    assert seen == [front.V2_RECEIVE]
    items = []
    rest = answer
    while rest:  # ReceiveBatch: tag 1, one-byte varint length (these items are short), item
        assert rest[0] == 0x0A and rest[1] < 0x80
        items.append(rest[2 : 2 + rest[1]])
        rest = rest[2 + rest[1] :]
    messages = [service.ReceiveMessageResponse.FromString(i[1:]).status.message for i in items]
    assert [i[:1] for i in items] == [front.ITEM_RESPONSE] * 2
    assert messages == ["billing", "second"]


async def test_a_send_encoded_in_the_front_is_seen_by_the_chain_as_send_message() -> None:
    seen: list[str] = []
    item = b"X" + definition.Message(topic={"name": "orders"}).SerializeToString()
    raw = encode_envelope(
        struct.pack(">I", len(item)) + item,
        metadata=[("x-mq-client-id", "client-7")],
        timeout_ms=5000,
    )
    answer = await framed(Servicer(), seen).call(frontappends.FRONT_SEND, raw)
    assert seen == [SEND]
    assert service.SendMessageResponse.FromString(answer).status.message == "client-7 orders True"


async def test_a_bug_in_a_handler_is_logged_and_answered_internal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    v2 = framed(Servicer(), [])
    with pytest.raises(RuntimeError) as raised:
        await v2.call(SERVICE_PREFIX + "AckMessage", envelope(service.AckMessageRequest()))
    code, payload = frontframes.failure(SERVICE_PREFIX + "AckMessage", raised.value)
    assert code == grpc.StatusCode.INTERNAL.value[0]
    assert (
        payload == b"\x00internal error in " + SERVICE_PREFIX.encode() + b"AckMessage: RuntimeError"
    )
    assert "failed unexpectedly" in caplog.text


async def test_a_method_the_chain_has_no_handler_for_is_unimplemented() -> None:
    v2 = frontframes.FramedV2({}, [])
    with pytest.raises(frontframes.FramedCallError) as raised:
        await v2.call(SEND, envelope(service.SendMessageRequest()))
    assert frontframes.failure(SEND, raised.value)[0] == grpc.StatusCode.UNIMPLEMENTED.value[0]


async def test_every_framed_method_has_a_handler() -> None:
    handlers = frontframes.FramedV2(frontframes.method_handlers(Servicer()), []).handlers()
    assert set(handlers) == set(frontframes.FRAMED_METHODS)


def test_frames_path_and_its_length_limit() -> None:
    beside = frames.frames_path(Path("/data/popack.sock"))
    assert str(beside) == "/data/popack.sock.frames"
    assert frames.fits(beside)
    assert not frames.fits(frames.frames_path(Path("/" + "d" * 110)))
