"""Every api value survives a trip through its proto message; errors map both ways."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popbroker.store import api, errors
from popbroker.store.wire import convert, errormap
from popbroker.store.wire import store_pb2 as pb
from tests.unit.store.records import with_record

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=20)
PROPS = st.dictionaries(TEXT, TEXT, max_size=4)


def test_store_info_round_trip() -> None:
    for mode in api.FlushMode:
        info = api.StoreInfo(
            cluster="c",
            broker_name="b-0",
            config_epoch="e1",
            flush_mode=mode,
            min_physical_offset=1,
            max_physical_offset=2**40,
            flushed_physical_offset=2**39,
            writable=False,
            last_error="disk full",
        )
        assert convert.info_from_pb(convert.info_to_pb(info)) == info


@given(
    st.lists(
        st.tuples(
            TEXT,
            st.integers(0, 2**31 - 1),
            INT64,
            INT64,
            st.integers(0, 2**32 - 1),
            INT64,
        ),
        max_size=40,
    )
)
def test_packed_append_results_round_trip(
    rows: list[tuple[str, int, int, int, int, int]],
) -> None:
    results = [api.AppendResult(*row) for row in rows]
    packed = convert.pack_append_results(results)
    assert convert.unpack_append_results(packed, [r.topic for r in results]) == results


def test_packed_results_of_the_wrong_length_are_refused() -> None:
    packed = convert.pack_append_results([api.AppendResult("t", 0, 1, 2, 3, 4)])
    with pytest.raises(errors.StoreError, match="32 bytes of results for 2 records"):
        convert.unpack_append_results(packed, ["t", "t"])


def _stored(queue_offset: int, *, tag: str = "A") -> api.StoredMessage:
    return api.StoredMessage(
        topic="t",
        queue_id=1,
        queue_offset=queue_offset,
        physical_offset=queue_offset * 100,
        body=b"\x00\xffbody",
        properties={api.PROPERTY_TAGS: tag, api.PROPERTY_KEYS: "k1 k2"},
        born_timestamp_ms=1,
        store_timestamp_ms=2,
        born_host="10.0.0.1:1234",
        reconsume_times=3,
        flags=4,
    )


def test_stored_message_round_trip() -> None:
    message = _stored(7)
    back = convert.stored_message_from_pb(convert.stored_message_to_pb(message))
    assert back == message
    assert back.tag == "A"


def test_a_message_read_with_its_record_travels_as_the_record_alone() -> None:
    message = with_record(_stored(7))
    wire = convert.stored_message_to_pb(message)
    assert wire.record == message.record
    assert wire.topic == "" and not wire.properties and wire.body == b""
    back = convert.stored_message_from_pb(pb.StoredMessage.FromString(wire.SerializeToString()))
    assert back == message
    assert back.record == message.record


@given(st.integers(min_value=0, max_value=10_000))
def test_a_damaged_record_on_the_wire_is_a_corrupt_store(flip: int) -> None:
    record = bytearray(with_record(_stored(7)).record)
    record[flip % len(record)] ^= 0x5A
    with pytest.raises(errors.CorruptStore):
        convert.stored_message_from_pb(pb.StoredMessage(record=bytes(record)))


def test_a_truncated_record_on_the_wire_is_a_corrupt_store() -> None:
    record = with_record(_stored(7)).record
    for cut in (1, 20, len(record) - 1):
        with pytest.raises(errors.CorruptStore):
            convert.stored_message_from_pb(pb.StoredMessage(record=record[:cut]))


@pytest.mark.parametrize("status", list(api.ReadStatus))
def test_read_result_round_trip(status: api.ReadStatus) -> None:
    messages = (_stored(5), _stored(9, tag="B")) if status is api.ReadStatus.FOUND else ()
    result = api.ReadResult(status, messages, 10, 0, 12)
    assert convert.read_result_from_pb(convert.read_result_to_pb(result)) == result


def test_bounds_round_trip() -> None:
    bounds = api.QueueBounds("t", 0, 5, 2**40)
    assert convert.bounds_from_pb(convert.bounds_to_pb(bounds)) == bounds


@given(tag_hash=INT64, queue_offset=INT64)
def test_arrival_round_trip(tag_hash: int, queue_offset: int) -> None:
    arrival = api.Arrival("t", 2, queue_offset, tag_hash)
    assert convert.arrival_from_pb(convert.arrival_to_pb(arrival)) == arrival


def test_committed_offset_round_trip() -> None:
    row = api.CommittedOffset("g", "t", 3, 2**36)
    assert convert.committed_offset_from_pb(convert.committed_offset_to_pb(row)) == row


@pytest.mark.parametrize("perm", list(api.Permission))
@pytest.mark.parametrize("message_type", list(api.MessageType))
def test_topic_round_trip(perm: api.Permission, message_type: api.MessageType) -> None:
    topic = api.TopicConfig("%RETRY%g+t", 8, 4, perm, message_type)
    assert convert.topic_from_pb(convert.topic_to_pb(topic)) == topic


@pytest.mark.parametrize(
    "policy",
    [
        api.RetryPolicy(),
        api.RetryPolicy("customized", 0, 0, 1.5, (1_000, 5_000, 60_000)),
    ],
)
@pytest.mark.parametrize("fifo", [False, True])
def test_group_round_trip(policy: api.RetryPolicy, fifo: bool) -> None:
    group = api.GroupConfig("g", 3, fifo, not fifo, policy)
    assert convert.group_from_pb(convert.group_to_pb(group)) == group


@pytest.mark.parametrize("mode", list(api.ConsumeMode))
def test_consume_mode_round_trip(mode: api.ConsumeMode) -> None:
    config = api.ConsumeModeConfig("g", "t", mode, 2)
    assert convert.consume_mode_from_pb(convert.consume_mode_to_pb(config)) == config


def test_member_round_trip() -> None:
    member = api.ClusterMember("broker-1", "10.1.2.3:8081")
    assert convert.member_from_pb(convert.member_to_pb(member)) == member


# ---------------------------------------------------------------- refusals


def test_unspecified_enums_are_refused() -> None:
    with pytest.raises(errors.InvalidArgument, match="flush_mode"):
        convert.info_from_pb(pb.StoreInfo())
    with pytest.raises(errors.InvalidArgument, match="message_type"):
        convert.topic_from_pb(pb.TopicConfig(name="t", perm=6))
    with pytest.raises(errors.InvalidArgument, match="mode"):
        convert.consume_mode_from_pb(pb.ConsumeModeConfig(group="g", topic="t"))
    with pytest.raises(errors.InvalidArgument, match="status"):
        convert.read_result_from_pb(pb.ReadResponse())


def test_unknown_permission_bits_are_refused() -> None:
    msg = pb.TopicConfig(name="t", perm=5, message_type=pb.MESSAGE_TYPE_NORMAL)
    with pytest.raises(errors.InvalidArgument, match="perm"):
        convert.topic_from_pb(msg)


def test_group_without_retry_policy_is_refused() -> None:
    with pytest.raises(errors.InvalidArgument, match="retry_policy"):
        convert.group_from_pb(pb.GroupConfig(name="g"))


def test_out_of_range_values_are_invalid_arguments() -> None:
    with pytest.raises(errors.InvalidArgument, match="AppendResult"):
        convert.pack_append_results([api.AppendResult("t", 2**31, 0, 0, 0, 0)])
    with pytest.raises(errors.InvalidArgument, match="Arrival"):
        convert.arrival_to_pb(api.Arrival("t", 0, 0, 2**63))


# ---------------------------------------------------------------- the error table


ALL_ERRORS = [
    errors.StoreError,
    errors.InvalidArgument,
    errors.InvalidName,
    errors.MessageTooLarge,
    errors.EmptyBody,
    errors.QueueShrinkRefused,
    errors.UnknownTopic,
    errors.UnknownGroup,
    errors.StoreFull,
    errors.StoreClosed,
    errors.NotLeader,
    errors.NotEnoughReplicas,
    errors.ReplicationTimeout,
    errors.CorruptStore,
]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.InvalidName, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.MessageTooLarge, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.EmptyBody, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.QueueShrinkRefused, grpc.StatusCode.FAILED_PRECONDITION),
        (errors.UnknownTopic, grpc.StatusCode.NOT_FOUND),
        (errors.UnknownGroup, grpc.StatusCode.NOT_FOUND),
        (errors.StoreFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (errors.StoreClosed, grpc.StatusCode.UNAVAILABLE),
        (errors.NotLeader, grpc.StatusCode.FAILED_PRECONDITION),
        (errors.NotEnoughReplicas, grpc.StatusCode.UNAVAILABLE),
        (errors.ReplicationTimeout, grpc.StatusCode.UNAVAILABLE),
        (errors.CorruptStore, grpc.StatusCode.DATA_LOSS),
        (errors.StoreError, grpc.StatusCode.INTERNAL),
    ],
)
def test_status_for_each_error(error: type[errors.StoreError], code: grpc.StatusCode) -> None:
    assert errormap.status_for(error("boom")) == (code, error.__name__)


@pytest.mark.parametrize("error", ALL_ERRORS)
def test_every_error_comes_back_as_itself(error: type[errors.StoreError]) -> None:
    code, name = errormap.status_for(error("the message"))
    back = errormap.error_from_status(code, "the message", name)
    assert type(back) is error
    assert str(back) == "the message"
    assert back.retriable == error.retriable


def test_every_error_class_is_covered() -> None:
    def walk(cls: type[errors.StoreError]) -> set[type[errors.StoreError]]:
        return {cls}.union(*(walk(sub) for sub in cls.__subclasses__()))

    defined = {c for c in walk(errors.StoreError) if c.__module__ == errors.__name__}
    assert defined == set(ALL_ERRORS)


def test_unlisted_subclass_maps_by_its_ancestor_and_flag() -> None:
    class OddName(errors.InvalidName):
        pass

    class Flaky(errors.StoreError):
        retriable = True

    assert errormap.status_for(OddName("x")) == (grpc.StatusCode.INVALID_ARGUMENT, "InvalidName")
    assert errormap.status_for(Flaky("x")) == (grpc.StatusCode.UNAVAILABLE, "StoreError")


def test_transport_failures_without_metadata() -> None:
    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        err = errormap.error_from_status(code, "connect failed", None)
        assert type(err) is errors.StoreClosed
        assert err.retriable
        assert "connect failed" in str(err)
    err = errormap.error_from_status(grpc.StatusCode.RESOURCE_EXHAUSTED, "message too big", None)
    assert type(err) is errors.StoreError
    assert not err.retriable


def test_unknown_error_name_falls_back_to_the_status_code() -> None:
    err = errormap.error_from_status(grpc.StatusCode.INVALID_ARGUMENT, "new kind", "FutureError")
    assert type(err) is errors.InvalidArgument
    err = errormap.error_from_status(grpc.StatusCode.NOT_FOUND, "new kind", "FutureError")
    assert type(err) is errors.StoreError
