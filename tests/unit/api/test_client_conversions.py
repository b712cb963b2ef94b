"""popfleet_api: values survive a trip through their proto messages; errors map by status."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from popfleet_api import convert, errors, models
from popfleet_api.admin.v1 import admin_pb2 as pb

NAMES = st.text(alphabet="abcXYZ019_-%", min_size=1, max_size=20)
COUNTS = st.integers(0, 2**31 - 1)


@given(
    name=NAMES,
    read=COUNTS,
    write=COUNTS,
    perm=st.sampled_from(models.Permission),
    message_type=st.sampled_from(models.MessageType),
    system=st.booleans(),
)
def test_topic_round_trip(
    name: str,
    read: int,
    write: int,
    perm: models.Permission,
    message_type: models.MessageType,
    system: bool,
) -> None:
    topic = models.Topic(name, read, write, perm, message_type, system)
    assert convert.topic_from_pb(convert.topic_to_pb(topic)) == topic


@given(
    kind=st.sampled_from(models.RetryKind),
    initial=st.integers(0, 2**62),
    maximum=st.integers(0, 2**62),
    multiplier=st.floats(allow_nan=False),
    steps=st.lists(st.integers(0, 2**62), max_size=5),
    reconsume=COUNTS,
    fifo=st.booleans(),
    enable=st.booleans(),
)
def test_group_round_trip(
    kind: models.RetryKind,
    initial: int,
    maximum: int,
    multiplier: float,
    steps: list[int],
    reconsume: int,
    fifo: bool,
    enable: bool,
) -> None:
    policy = models.RetryPolicy(kind, initial, maximum, multiplier, tuple(steps))
    group = models.Group("g", reconsume, policy, fifo, enable)
    assert convert.group_from_pb(convert.group_to_pb(group)) == group


def test_member_and_offset_key_round_trip() -> None:
    member = models.Member("broker-0", "10.0.0.1:8081")
    assert convert.member_from_pb(convert.member_to_pb(member)) == member
    key = models.OffsetTableKey("g", "t", 3)
    assert convert.offset_table_key_from_pb(convert.offset_table_key_to_pb(key)) == key


def test_values_that_do_not_fit_are_refused_before_sending() -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        convert.topic_to_pb(models.Topic("t", 2**40, 1))
    assert caught.value.reason == "BAD_VALUE"


def test_unset_optionals_become_none_not_zero() -> None:
    row = convert.queue_offsets_from_pb(pb.QueueOffsets(topic="t", queue_id=1, max_queue_offset=9))
    assert row == models.QueueOffsets("t", 1, 0, 9, None, None, None)
    assert row.lag_messages is None  # never committed: no lag (Burrow, kafka-lag-exporter)
    assert row.unconsumed_messages == 9
    set_row = convert.queue_offsets_from_pb(
        pb.QueueOffsets(
            topic="t",
            queue_id=1,
            min_queue_offset=2,
            max_queue_offset=9,
            committed_queue_offset=0,
            in_flight_messages=0,
            oldest_unconsumed_store_time_ms=0,
        )
    )
    assert (set_row.committed_queue_offset, set_row.in_flight_messages) == (0, 0)
    assert set_row.oldest_unconsumed_store_time_ms == 0
    assert set_row.lag_messages == 7  # the committed offset is below min: min counts


def test_revive_stats_and_pages_from_pb() -> None:
    stats = convert.revive_stats_from_pb(
        pb.GetReviveStatsResponse(
            revive_topic="rmq_sys_REVIVE_LOG_c",
            queues=[pb.ReviveQueueStats(revive_queue_id=0, max_queue_offset=3, lag_messages=3)],
            groups=[pb.GroupRetryStats(group="g", retry_messages=1, dlq_messages=2)],
            now_ms=5,
        )
    )
    assert stats.queues[0].revive_queue_offset is None
    assert stats.queues[0].ledger is None
    assert stats.checkpoint_buffer is None
    assert stats.groups == (models.GroupRetryStats("g", 1, 2),)

    page = convert.revive_log_page_from_pb(
        pb.ReviveLogPage(
            records=[
                pb.ReviveRecord(
                    queue_offset=4,
                    next_queue_offset=5,
                    kind=pb.REVIVE_RECORD_KIND_ACK,
                    tag="ack",
                    ack=pb.AckRecord(topic="t", group="g", ack_queue_offsets=[7]),
                ),
                pb.ReviveRecord(
                    kind=pb.REVIVE_RECORD_KIND_MALFORMED, tag="x", malformed_reason="bad"
                ),
            ],
            next_queue_offset=5,
        )
    )
    ack, bad = page.records
    assert ack.ack == models.AckRecord("t", "g", 0, 0, 0, None, (7,))  # no bn: the local broker
    assert (bad.kind, bad.malformed_reason, bad.ack) == (
        models.ReviveRecordKind.MALFORMED,
        "bad",
        None,
    )


def test_unknown_enums_from_a_newer_broker_are_errors() -> None:
    with pytest.raises(errors.AdminError):
        convert.topic_from_pb(pb.Topic(name="t", perm=pb.Permission.ValueType(99)))
    with pytest.raises(errors.AdminError):
        convert.consume_mode_setting_from_pb(pb.ConsumeModeSetting())


@pytest.mark.parametrize(
    ("code", "cls", "retriable"),
    [
        ("INVALID_ARGUMENT", errors.InvalidArgument, False),
        ("NOT_FOUND", errors.NotFound, False),
        ("FAILED_PRECONDITION", errors.FailedPrecondition, False),
        ("OUT_OF_RANGE", errors.OutOfRange, False),
        ("UNAUTHENTICATED", errors.Unauthenticated, False),
        ("PERMISSION_DENIED", errors.PermissionDenied, False),
        ("UNIMPLEMENTED", errors.Unimplemented, False),
        ("UNAVAILABLE", errors.Unavailable, True),
        ("DEADLINE_EXCEEDED", errors.DeadlineExceeded, True),
        ("RESOURCE_EXHAUSTED", errors.ResourceExhausted, True),
        ("DATA_LOSS", errors.DataLoss, False),
        ("INTERNAL", errors.AdminError, False),
    ],
)
def test_errors_by_status(code: str, cls: type[errors.AdminError], retriable: bool) -> None:
    error = errors.from_status(code, "boom", reason="WHY", target="h:1")
    assert type(error) is cls
    assert (error.code, error.retriable, error.reason, error.target) == (
        code,
        retriable,
        "WHY",
        "h:1",
    )
    assert str(error) == f"h:1: {code}: boom"


@pytest.mark.parametrize(
    ("text", "perm"),
    [
        ("rw", models.Permission.READ_WRITE),
        ("6", models.Permission.READ_WRITE),
        ("read_write", models.Permission.READ_WRITE),
        ("Read-Write", models.Permission.READ_WRITE),
        ("R", models.Permission.READ),
        ("4", models.Permission.READ),
        ("write", models.Permission.WRITE),
        ("none", models.Permission.NONE),
        ("0", models.Permission.NONE),
    ],
)
def test_permission_parse(text: str, perm: models.Permission) -> None:
    assert models.Permission.parse(text) is perm


def test_permission_parse_refuses_nonsense_and_knows_rocketmq_bits() -> None:
    with pytest.raises(ValueError, match="unknown permission"):
        models.Permission.parse("7")
    assert [p.rocketmq_bits for p in models.Permission] == [0, 2, 4, 6]
