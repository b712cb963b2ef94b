"""Bad input at the services boundary: the right error, never a crash."""

from __future__ import annotations

import pytest

from popbroker.pop import errors as pop_errors
from popbroker.services import errors
from popbroker.services.receiving import ReceiveRequest
from tests.unit.services.conftest import GROUP, TOPIC, Broker


@pytest.mark.parametrize(
    "handle",
    [
        "",
        "garbage",
        "1 2 3",
        "0 1700000000000 10000 0 0 broker-0 0 0",  # truncated: 8 fields
        "0 1700000000000 10000 0 0 other-broker 0 0 0",  # another broker's
        "0 1700000000000 10000 77 0 broker-0 0 0 0",  # no such revive queue
        "0 1700000000000 10000 0 0 broker-0 9 0 0",  # no such queue
        "-1 1700000000000 10000 0 0 broker-0 0 0 0",
        "0 1700000000000 10000 0 0 broker-0 0 0 0 extra",
        "0 99999999999999 10000 0 0 broker-0 0 0 0",  # from the future
        "0 1600000000000 10000 0 0 broker-0 0 0 0",  # long expired
        "x" * 10_000,
    ],
)
async def test_forged_handles_are_refused(broker: Broker, handle: str) -> None:
    acker = broker.popack.acker
    with pytest.raises(pop_errors.InvalidReceiptHandle):
        await acker.ack(group=GROUP, topic=TOPIC, receipt_handle=handle)
    with pytest.raises(pop_errors.InvalidReceiptHandle):
        await acker.change_invisible(
            group=GROUP, topic=TOPIC, receipt_handle=handle, invisible_ms=1_000
        )


async def test_well_formed_handle_for_a_missing_message_is_refused(broker: Broker) -> None:
    now = broker.clock()
    handle = f"5 {now} 10000 0 0 broker-0 0 5 0"
    with pytest.raises(pop_errors.InvalidReceiptHandle):
        await broker.popack.acker.ack(group=GROUP, topic=TOPIC, receipt_handle=handle)


async def test_unknown_group_and_topic(broker: Broker) -> None:
    with pytest.raises(errors.GroupNotFound):
        await broker.receive(group="nobody")
    with pytest.raises(errors.TopicNotFound):
        await broker.receive(topic="nothing")
    with pytest.raises(errors.GroupNotFound):
        await broker.popack.acker.ack(group="nobody", topic=TOPIC, receipt_handle="x")


@pytest.mark.parametrize(
    ("batch", "invisible_ms", "error"),
    [
        (33, 10_000, pop_errors.IllegalBatchSize),
        (0, 10_000, pop_errors.IllegalBatchSize),
        (1, 0, pop_errors.IllegalInvisibleTime),
        (1, 13 * 3600 * 1000, pop_errors.IllegalInvisibleTime),
    ],
)
async def test_receive_parameters_out_of_range(
    broker: Broker, batch: int, invisible_ms: int, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await broker.receive(batch=batch, invisible_ms=invisible_ms)


async def test_sql_filters_are_refused(broker: Broker) -> None:
    request = ReceiveRequest(group=GROUP, topic=TOPIC, batch_size=1, sql_filter=True, poll_ms=0)
    with pytest.raises(errors.IllegalFilterExpression):
        await broker.popack.receiver.receive(request)
    bad = ReceiveRequest(group=GROUP, topic=TOPIC, batch_size=1, filter_expression="a||", poll_ms=0)
    with pytest.raises(errors.IllegalFilterExpression):
        await broker.popack.receiver.receive(bad)


async def test_change_invisible_out_of_range(broker: Broker) -> None:
    await broker.send(b"x")
    (message,) = await broker.receive()
    with pytest.raises(pop_errors.IllegalInvisibleTime):
        await broker.popack.acker.change_invisible(
            group=GROUP,
            topic=TOPIC,
            receipt_handle=message.receipt_handle,
            invisible_ms=13 * 3600 * 1000,
        )


async def test_one_request_s_acks_answer_each_handle_alone(broker: Broker) -> None:
    """ack_many (AckMessage's entries): each handle gets what ack() alone would give it."""
    for body in (b"a", b"b", b"c"):
        await broker.send(body)
    first, second, third = await broker.receive(3)
    forged = "0 1700000000000 10000 0 0 other-broker 0 0 0"
    outcomes = await broker.popack.acker.ack_many(
        group=GROUP,
        topic=TOPIC,
        receipt_handles=[
            first.receipt_handle,
            forged,
            second.receipt_handle,
            "",
            first.receipt_handle,
        ],
    )
    assert [type(o).__name__ if o else None for o in outcomes] == [
        None,
        "InvalidReceiptHandle",
        None,
        "InvalidReceiptHandle",
        None,  # acks are idempotent
    ]
    broker.clock.advance(10_000)
    await broker.flush()
    broker.clock.advance(1_000)
    await broker.revive_step()
    (again,) = await broker.receive(3)  # only the one left unacked comes back
    assert again.stored.body == third.stored.body
    late = await broker.popack.acker.ack_many(
        group=GROUP, topic=TOPIC, receipt_handles=[third.receipt_handle]
    )
    assert isinstance(late[0], pop_errors.InvalidReceiptHandle)  # expired


async def test_acks_for_an_unknown_group_all_answer_group_not_found(broker: Broker) -> None:
    outcomes = await broker.popack.acker.ack_many(
        group="nobody", topic=TOPIC, receipt_handles=["x", "y"]
    )
    assert len(outcomes) == 2
    assert all(isinstance(o, errors.GroupNotFound) for o in outcomes)
    assert await broker.popack.acker.ack_many(group=GROUP, topic=TOPIC, receipt_handles=[]) == []
