"""Revive-log records: round trip, short keys, strict decoding, missing broker name."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.pop import checkpoints, errors, records
from popbroker.pop.checkpoints import Checkpoint
from popbroker.pop.records import AckRecord

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
    ack_bitmap=0b010,
    reput_times=2,
)
ACK = AckRecord(
    topic="orders",
    group="billing",
    queue_id=1,
    start_queue_offset=100,
    pop_time_ms=1_722_325_671_049,
    broker_name="broker-a",
    ack_queue_offsets=(105,),
)


def test_ck_record_uses_rocketmq_short_keys_and_round_trips() -> None:
    encoded = records.encode(CK)
    assert encoded.tag == "ck"
    assert json.loads(encoded.body) == {
        "v": 1,
        "so": 100,
        "pt": 1_722_325_671_049,
        "it": 60_000,
        "bm": 2,
        "n": 3,
        "q": 1,
        "t": "orders",
        "c": "billing",
        "d": [0, 1, 5],
        "bn": "broker-a",
        "rp": 2,
    }
    assert b" " not in encoded.body
    assert records.decode(encoded.tag, encoded.body, revive_queue_id=3) == CK


def test_single_and_batch_acks_round_trip() -> None:
    single = records.encode(ACK)
    assert single.tag == "ack"
    assert json.loads(single.body)["ao"] == 105
    assert records.decode(single.tag, single.body, revive_queue_id=3) == ACK
    batch_ack = AckRecord(**{**_fields(ACK), "ack_queue_offsets": (100, 105)})  # type: ignore[arg-type]
    batch = records.encode(batch_ack)
    assert batch.tag == "bAck"
    assert json.loads(batch.body)["ao"] == -1
    assert json.loads(batch.body)["aol"] == [100, 105]
    assert records.decode(batch.tag, batch.body, revive_queue_id=3) == batch_ack


def _fields(ack: AckRecord) -> dict[str, object]:
    return {name: getattr(ack, name) for name in AckRecord.__slots__}


def test_ack_without_bn_matches_the_local_broker_upstream_8460() -> None:
    body = b'{"ao":105,"so":100,"c":"billing","t":"orders","q":1,"pt":1722325671049}'
    ack = records.decode("ack", body, revive_queue_id=3)
    assert isinstance(ack, AckRecord)
    assert ack.broker_name is None
    assert records.ack_key(ack, local_broker_name="broker-a") == CK.key


def test_acks_always_carry_bn_when_built_from_a_key_upstream_8835() -> None:
    ack = records.ack_for(CK.key, (101,))
    assert json.loads(records.encode(ack).body)["bn"] == "broker-a"


def test_every_record_written_carries_the_format_version() -> None:
    for record in (CK, ACK, records.ack_for(CK.key, (100, 105))):
        assert json.loads(records.encode(record).body)["v"] == records.FORMAT_VERSION == 1


def test_bodies_written_before_the_version_still_read() -> None:
    # What brokers wrote before "v" existed: the same keys, no version.
    old_ck = (
        b'{"so":100,"pt":1722325671049,"it":60000,"bm":2,"n":3,"q":1,'
        b'"t":"orders","c":"billing","d":[0,1,5],"bn":"broker-a","rp":2}'
    )
    assert records.decode("ck", old_ck, revive_queue_id=3) == CK
    old_ack = (
        b'{"ao":105,"so":100,"c":"billing","t":"orders","q":1,"pt":1722325671049,"bn":"broker-a"}'
    )
    assert records.decode("ack", old_ack, revive_queue_id=3) == ACK


def test_a_newer_version_with_unknown_keys_reads_when_the_required_keys_are_there() -> None:
    # A rolling upgrade: a newer popack adds a field; this revive role must not drop the CK.
    newer = json.loads(records.encode(CK).body)
    newer.update({"v": 2, "zz": {"nested": [1, 2]}, "xp": "later"})
    assert records.decode("ck", json.dumps(newer).encode(), revive_queue_id=3) == CK
    ack_body = b'{"v":2,"ao":1,"so":0,"c":"g","t":"t","q":0,"pt":1,"zz":1}'
    ack = records.decode("ack", ack_body, revive_queue_id=0)
    assert isinstance(ack, AckRecord)
    assert ack.ack_queue_offsets == (1,)
    missing = {k: v for k, v in newer.items() if k != "pt"}
    with pytest.raises(errors.MalformedRecord, match="lacks keys"):
        records.decode("ck", json.dumps(missing).encode(), revive_queue_id=3)


@pytest.mark.parametrize(
    ("tag", "body"),
    [
        ("ck", b""),
        ("ck", b"[]"),
        ("ck", b"\xff\xfe"),
        ("ck", b"{}"),
        ("ck", b"[" * 100_000),
        ("ck", b"[" * 5_000),
        ("ck", b'{"so":NaN}'),
        ("nope", b"{}"),
        ("ack", b'{"ao":1,"so":0,"c":"g","t":"t","q":0,"pt":true}'),
        ("ack", b'{"ao":1.5,"so":0,"c":"g","t":"t","q":0,"pt":1}'),
        ("ack", b'{"ao":"1","so":0,"c":"g","t":"t","q":0,"pt":1}'),
        ("ack", b'{"ao":-2,"so":0,"c":"g","t":"t","q":0,"pt":1}'),
        ("ack", b'{"ao":1,"so":0,"c":"","t":"t","q":0,"pt":1}'),
        ("ack", b'{"v":0,"ao":1,"so":0,"c":"g","t":"t","q":0,"pt":1}'),
        ("ack", b'{"v":"1","ao":1,"so":0,"c":"g","t":"t","q":0,"pt":1}'),
        ("ack", b'{"v":true,"ao":1,"so":0,"c":"g","t":"t","q":0,"pt":1}'),
        ("ack", b'{"v":2,"so":0,"c":"g","t":"t","q":0,"pt":1,"zz":1}'),
        ("ack", b'{"ao":1,"so":0,"c":"g","t":"t","q":0,"pt":1,"bn":7}'),
        ("bAck", b'{"ao":1,"so":0,"c":"g","t":"t","q":0,"pt":1,"aol":[1]}'),
        ("bAck", b'{"ao":-1,"so":0,"c":"g","t":"t","q":0,"pt":1,"aol":[]}'),
        ("bAck", b'{"ao":-1,"so":0,"c":"g","t":"t","q":0,"pt":1,"aol":{"a":1}}'),
        ("ck", records.encode(CK).body.replace(b'"n":3', b'"n":4')),
        ("ck", records.encode(CK).body.replace(b'"bm":2', b'"bm":8')),
        ("ck", records.encode(CK).body.replace(b'"d":[0,1,5]', b'"d":[1,0,5]')),
        ("ck", records.encode(CK).body.replace(b'"so":100', b'"so":99999999999999999999')),
        ("ck", records.encode(CK).body.replace(b',"bn":"broker-a"', b"")),
    ],
)
def test_malformed_bodies_raise_malformed_record(tag: str, body: bytes) -> None:
    with pytest.raises(errors.MalformedRecord):
        records.decode(tag, body, revive_queue_id=0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
record_keys = st.sampled_from(["so", "pt", "it", "bm", "n", "q", "t", "c", "d", "bn", "rp", "ao"])


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["ck", "ack", "bAck"]),
    st.dictionaries(record_keys | st.just("aol"), json_values, max_size=12),
)
def test_fuzz_json_objects_raise_only_malformed_record(tag: str, obj: dict[str, object]) -> None:
    with contextlib.suppress(errors.MalformedRecord):
        records.decode(tag, json.dumps(obj).encode(), revive_queue_id=0)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["ck", "ack", "bAck"]), st.binary(max_size=300))
def test_fuzz_bytes_raise_only_malformed_record(tag: str, body: bytes) -> None:
    with contextlib.suppress(errors.MalformedRecord):
        records.decode(tag, body, revive_queue_id=0)


def test_encoding_an_empty_ack_is_refused() -> None:
    with pytest.raises(errors.MalformedRecord):
        records.encode(AckRecord("t", "g", 0, 0, 0, "b", ()))


def test_written_bitmap_is_the_one_in_memory() -> None:
    acked = checkpoints.with_bitmap(CK, 0b1)  # offset 100 acked
    decoded = records.decode("ck", records.encode(acked).body, revive_queue_id=3)
    assert isinstance(decoded, Checkpoint)
    assert decoded.ack_bitmap == 0b011
