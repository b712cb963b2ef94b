"""The revive-log envelope: one decoder for CK, ACK, delay and malformed records."""

from __future__ import annotations

import pytest

from popbroker.pop import records, revivelog
from popbroker.pop.checkpoints import Checkpoint
from popbroker.services import revivelog as appending
from popbroker.store.api import PROPERTY_TAGS

CK = Checkpoint(
    topic="orders",
    group="billing",
    queue_id=1,
    start_queue_offset=100,
    pop_time_ms=1_722_325_671_049,
    invisible_ms=60_000,
    revive_queue_id=3,
    broker_name="broker-a",
    queue_offset_diffs=(0, 1, 5),
)


def test_ck_and_ack_messages_decode_to_their_records() -> None:
    ck = appending.ck_message("c1", CK)
    assert (
        revivelog.decode(ck.properties[PROPERTY_TAGS], ck.properties, ck.body, revive_queue_id=3)
        == CK
    )
    ack = records.ack_for(CK.key, (101,))
    message = appending.record_message("c1", ack, revive_queue_id=3)
    decoded = revivelog.decode(
        message.properties[PROPERTY_TAGS], message.properties, message.body, revive_queue_id=3
    )
    assert decoded == ack


def test_a_delay_message_decodes_to_its_target_and_original_properties() -> None:
    record = appending.DelayRecord(
        topic="orders",
        queue_id=2,
        deliver_ms=1_000_000,
        body=b"later",
        properties={"KEYS": "k1", "x": "y"},
        born_timestamp_ms=5,
        born_host="h:1",
    )
    message = appending.delay_message("c1", record, revive_queue_id=4)
    assert message.properties[PROPERTY_TAGS] == revivelog.DELAY_TAG
    decoded = revivelog.decode(
        revivelog.DELAY_TAG, message.properties, message.body, revive_queue_id=4
    )
    assert decoded == revivelog.Delay(
        topic="orders",
        queue_id=2,
        deliver_ms=1_000_000,
        original_properties={"KEYS": "k1", "x": "y"},
    )


GOOD_DELAY = {
    revivelog.PROPERTY_DELAY_TOPIC: "orders",
    revivelog.PROPERTY_DELAY_QUEUE: "3",
    revivelog.PROPERTY_DELAY_DELIVER_MS: "9000",
}


def test_a_delay_without_original_properties_has_none() -> None:
    decoded = revivelog.decode(revivelog.DELAY_TAG, GOOD_DELAY, b"", revive_queue_id=0)
    assert decoded == revivelog.Delay("orders", 3, 9000, {})


@pytest.mark.parametrize(
    ("tag", "properties", "body"),
    [
        ("nope", {}, b"{}"),
        ("ck", {}, b"{}"),
        ("ack", {}, b"not json"),
        (revivelog.DELAY_TAG, {}, b""),
        (revivelog.DELAY_TAG, {**GOOD_DELAY, revivelog.PROPERTY_DELAY_TOPIC: ""}, b""),
        (revivelog.DELAY_TAG, {**GOOD_DELAY, revivelog.PROPERTY_DELAY_QUEUE: "-1"}, b""),
        (revivelog.DELAY_TAG, {**GOOD_DELAY, revivelog.PROPERTY_DELAY_QUEUE: "²"}, b""),
        (revivelog.DELAY_TAG, {**GOOD_DELAY, revivelog.PROPERTY_DELAY_DELIVER_MS: "soon"}, b""),
        (revivelog.DELAY_TAG, {**GOOD_DELAY, revivelog.PROPERTY_DELAY_ORIGINAL: "{"}, b""),
        (revivelog.DELAY_TAG, {**GOOD_DELAY, revivelog.PROPERTY_DELAY_ORIGINAL: '{"a":1}'}, b""),
        (revivelog.DELAY_TAG, {**GOOD_DELAY, revivelog.PROPERTY_DELAY_ORIGINAL: "[]"}, b""),
    ],
)
def test_bad_records_are_malformed_never_an_exception(
    tag: str, properties: dict[str, str], body: bytes
) -> None:
    decoded = revivelog.decode(tag, properties, body, revive_queue_id=0)
    assert isinstance(decoded, revivelog.Malformed)
    assert decoded.reason
