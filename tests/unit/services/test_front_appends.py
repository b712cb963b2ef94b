"""Sends encoded in popfront (``popbroker.grpc.frontappends``), popack's half.

``broker_image/front/testdata/appends.json`` is what the Python reference answers today
(``go test`` in ``broker_image/front`` compares popfront's append items with it), and the
sender stores and refuses an encoded message as it does the decoded one."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from popbroker.grpc import convert
from popbroker.grpc.protocol import definition
from popbroker.services import errors
from popbroker.services.messages import EncodedMessage, MessageKind, OutgoingMessage, SendReceipt
from popbroker.store import errors as store_errors
from popbroker.store import format as fmt
from popbroker.store.api import PROPERTY_UNIQUE_ID
from tests.unit.services import front_appends
from tests.unit.services.conftest import TOPIC, Broker

FIXTURE = Path(__file__).resolve().parents[3] / "broker_image/front/testdata/appends.json"


def _decoded(case: dict[str, Any]) -> tuple[str, str, Any]:
    """A case with its record decoded (user properties come from a map: no fixed order)."""
    raw = base64.b64decode(case["record"])
    record = fmt.parse_unplaced(raw) if raw else None
    fields = None if record is None else (record.topic, record.properties, record.body_size)
    # the error's type: with two bad keys, which one it names depends on the map's order
    return case["message"], case["error"].partition(":")[0], fields


def test_the_fixture_is_the_references_answer_today() -> None:
    kept = [_decoded(case) for case in json.loads(FIXTURE.read_text())["cases"]]
    assert kept == [_decoded(case) for case in front_appends.cases()["cases"]], (
        "regenerate: .venv/bin/python -m tests.unit.services.front_appends "
        "> broker_image/front/testdata/appends.json"
    )


def test_the_fixture_has_messages_the_reference_accepts_and_refuses() -> None:
    errors = [case["error"] for case in front_appends.cases()["cases"]]
    assert errors.count("") >= 20
    assert len(errors) - errors.count("") >= 20


def _encoded(outgoing: OutgoingMessage, record: bytes) -> EncodedMessage:
    """What popack makes of popfront's ``A`` item for ``outgoing`` (its record: the case's)."""
    props = outgoing.user_properties or {}
    return EncodedMessage(
        topic=outgoing.topic,
        message_id=outgoing.message_id,
        kind=outgoing.kind,
        tag=outgoing.tag,
        message_group=outgoing.message_group,
        body_size=len(outgoing.body),
        user_properties=len(props),
        user_properties_bytes=sum(len(k.encode()) + len(v.encode()) for k, v in props.items()),
        record=record,
    )


async def test_an_encoded_message_is_stored_as_its_decoded_message_would_be(
    broker: Broker,
) -> None:
    """Every accepted NORMAL or FIFO case, sent as popfront's records in batches, is stored
    and read back with the reference's properties, body and born fields, in the queue the
    sender's rules choose (FIFO: its group's hash)."""
    await broker.store.put_topic(front_appends.TOPIC)
    accepted = []
    for case in front_appends.cases()["cases"]:
        message = definition.Message.FromString(base64.b64decode(case["message"]))
        outgoing = convert.outgoing_message(message)
        if not case["error"] and outgoing.kind in (MessageKind.NORMAL, MessageKind.FIFO):
            accepted.append((outgoing, base64.b64decode(case["record"])))
    assert len(accepted) >= 20
    for start in range(0, len(accepted), 7):
        batch = accepted[start : start + 7]
        outcomes = await broker.popack.sender.send_batch([_encoded(o, r) for o, r in batch])
        for (outgoing, _), outcome in zip(batch, outcomes, strict=True):
            assert isinstance(outcome, SendReceipt), outcome
            assert outcome.message_id == outgoing.message_id
            if outgoing.message_group:
                assert outcome.queue_id == zlib.crc32(outgoing.message_group.encode()) % 8
    stored = {}
    for queue_id in range(8):
        read = await broker.store.read(front_appends.TOPIC.name, queue_id, 0, max_count=100)
        for message in read.messages:
            stored[message.properties[PROPERTY_UNIQUE_ID]] = message
    assert len(stored) == len({o.message_id for o, _ in accepted})
    for outgoing, record in accepted:
        reference = fmt.parse_unplaced(record)
        got = stored[outgoing.message_id]
        assert got.properties == reference.properties
        assert got.body == outgoing.body
        assert got.born_host == outgoing.born_host
        assert got.born_timestamp_ms == (outgoing.born_timestamp_ms or broker.clock())


def _head(**fields: Any) -> EncodedMessage:
    base = {
        "topic": TOPIC,
        "message_id": "ID-1",
        "kind": MessageKind.NORMAL,
        "tag": None,
        "message_group": None,
        "body_size": 5,
        "user_properties": 0,
        "user_properties_bytes": 0,
        "record": b"",
    }
    return EncodedMessage(**{**base, **fields})


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (_head(body_size=0), store_errors.EmptyBody),
        (_head(body_size=4 * 1024 * 1024 + 1), store_errors.MessageTooLarge),
        (_head(topic="nope"), errors.TopicNotFound),
        (_head(message_id=" "), errors.IllegalMessage),
        (_head(tag="a|b"), errors.IllegalMessage),
        (_head(tag=" "), errors.IllegalMessage),
        (_head(kind=MessageKind.FIFO, message_group="g"), errors.MessageTypeConflict),
        (_head(topic="fifo-orders", kind=MessageKind.FIFO), errors.IllegalMessage),
        (_head(topic="fifo-orders", kind=MessageKind.FIFO, message_group="g" * 129),
         errors.IllegalMessage),
        (_head(kind=MessageKind.TRANSACTION), errors.Unsupported),
        (_head(topic="mixed", kind=MessageKind.DELAY), errors.MessageCorrupted),
        (_head(user_properties=129), errors.PropertiesTooLarge),
        (_head(user_properties=1, user_properties_bytes=16 * 1024 + 1), errors.PropertiesTooLarge),
    ],
)  # fmt: skip
async def test_an_encoded_message_is_refused_by_its_head_as_a_decoded_one(
    broker: Broker, message: EncodedMessage, error: type[Exception]
) -> None:
    (outcome,) = await broker.popack.sender.send_batch([message])
    assert type(outcome) is error or isinstance(outcome, error), outcome
    assert await broker.receive() == []
