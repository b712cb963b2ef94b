"""Contract: appends land densely per queue and read back exactly (every StoreApi)."""

from __future__ import annotations

import asyncio

import pytest

from popbroker.store import appending
from popbroker.store.api import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    MessageToAppend,
    ReadStatus,
    StoreApi,
    TopicConfig,
)
from popbroker.store.errors import (
    EmptyBody,
    InvalidArgument,
    InvalidName,
    MessageTooLarge,
    QueueShrinkRefused,
    UnknownTopic,
)


def _msg(queue: int, body: bytes, tag: str = "", **props: str) -> MessageToAppend:
    properties = dict(props)
    if tag:
        properties[PROPERTY_TAGS] = tag
    return MessageToAppend(
        topic="orders",
        queue_id=queue,
        body=body,
        properties=properties,
        born_timestamp_ms=1_700_000_000_000,
        born_host="127.0.0.1:4000",
    )


async def test_append_returns_dense_queue_offsets_per_queue(store: StoreApi) -> None:
    results = await store.append([_msg(i % 3, f"m{i}".encode()) for i in range(30)])
    per_queue: dict[int, list[int]] = {}
    for r in results:
        per_queue.setdefault(r.queue_id, []).append(r.queue_offset)
    assert per_queue == {q: list(range(10)) for q in range(3)}
    more = await store.append([_msg(0, b"next")])
    assert more[0].queue_offset == 10
    physical = [r.physical_offset for r in results + more]
    assert physical == sorted(physical)
    assert len(set(physical)) == len(physical)


async def test_read_returns_every_field_written(store: StoreApi) -> None:
    written = await store.append(
        [_msg(1, b"payload-\x00\xff", tag="A", **{PROPERTY_KEYS: "k1", "x": "y"})]
    )
    result = await store.read("orders", 1, 0, max_count=32)
    assert result.status is ReadStatus.FOUND
    (m,) = result.messages
    assert m.body == b"payload-\x00\xff"
    assert m.tag == "A"
    assert m.properties == {PROPERTY_TAGS: "A", PROPERTY_KEYS: "k1", "x": "y"}
    assert (m.topic, m.queue_id, m.queue_offset) == ("orders", 1, 0)
    assert m.physical_offset == written[0].physical_offset
    assert m.born_timestamp_ms == 1_700_000_000_000
    assert m.store_timestamp_ms == written[0].store_timestamp_ms
    assert m.born_host == "127.0.0.1:4000"
    assert result.next_queue_offset == 1
    assert (result.min_queue_offset, result.max_queue_offset) == (0, 1)


async def test_records_encoded_by_the_caller_append_as_their_messages(store: StoreApi) -> None:
    messages = [_msg(i % 2, f"r{i}".encode(), tag="B", x=str(i)) for i in range(6)]
    messages.append(MessageToAppend("orders", 3, b"born now"))  # born 0: the store's time
    written = await store.append_records([appending.encode_unplaced(m) for m in messages])
    assert [(r.topic, r.queue_id, r.queue_offset) for r in written] == [
        ("orders", 0, 0), ("orders", 1, 0), ("orders", 0, 1), ("orders", 1, 1),
        ("orders", 0, 2), ("orders", 1, 2), ("orders", 3, 0),
    ]  # fmt: skip
    read = await store.read("orders", 1, 0, max_count=32, tag_filter="B")
    assert [(m.body, m.properties) for m in read.messages] == [
        (f"r{i}".encode(), {PROPERTY_TAGS: "B", "x": str(i)}) for i in (1, 3, 5)
    ]
    assert [m.physical_offset for m in read.messages] == [
        written[i].physical_offset for i in (1, 3, 5)
    ]
    (late,) = (await store.read("orders", 3, 0, max_count=1)).messages
    assert late.born_timestamp_ms == late.store_timestamp_ms == written[-1].store_timestamp_ms
    with pytest.raises(InvalidArgument, match="not an unplaced record"):
        await store.append_records([appending.encode_unplaced(messages[0]), b"\x00" * 70])
    with pytest.raises(InvalidArgument, match="at least one"):
        await store.append_records([])
    assert (await store.bounds("orders", 0)).max_queue_offset == 3  # nothing of either


async def test_reads_page_through_a_queue_in_order(store: StoreApi) -> None:
    await store.append([_msg(2, f"{i}".encode()) for i in range(100)])
    seen, offset = [], 0
    while True:
        result = await store.read("orders", 2, offset, max_count=7)
        if result.status is ReadStatus.OFFSET_OVERFLOW_ONE:
            break
        seen += [int(m.body) for m in result.messages]
        offset = result.next_queue_offset
    assert seen == list(range(100))


async def test_tag_filter_skips_entries_and_reports_next_offset(store: StoreApi) -> None:
    tags = ["A", "B", "", "C", "A", "B"] * 5
    await store.append([_msg(0, f"{i}".encode(), tag=t) for i, t in enumerate(tags)])
    result = await store.read("orders", 0, 0, max_count=4, tag_filter="A||C")
    assert [m.tag for m in result.messages] == ["A", "C", "A", "A"]
    assert result.next_queue_offset == 7  # scanned through the 4th match at offset 6
    none = await store.read("orders", 0, 0, max_count=4, tag_filter="Z")
    assert none.status is ReadStatus.NO_MATCHED_MESSAGE
    assert none.messages == ()
    assert none.next_queue_offset == len(tags)


async def test_scan_limit_bounds_a_selective_read(store: StoreApi) -> None:
    await store.append([_msg(0, b"x", tag="N") for _ in range(50)] + [_msg(0, b"hit", tag="Y")])
    first = await store.read("orders", 0, 0, max_count=1, tag_filter="Y", max_scan=20)
    assert first.status is ReadStatus.NO_MATCHED_MESSAGE
    assert first.next_queue_offset == 20
    offset = first.next_queue_offset
    for _ in range(5):
        result = await store.read("orders", 0, offset, max_count=1, tag_filter="Y", max_scan=20)
        if result.messages:
            assert result.messages[0].body == b"hit"
            return
        offset = result.next_queue_offset
    pytest.fail("the matching message was never reached")


async def test_read_status_at_the_edges(store: StoreApi) -> None:
    empty = await store.read("orders", 3, 0, max_count=1)
    assert empty.status is ReadStatus.NO_MESSAGE_IN_QUEUE
    await store.append([_msg(3, b"a"), _msg(3, b"b")])
    assert (await store.read("orders", 3, 2, max_count=1)).status is ReadStatus.OFFSET_OVERFLOW_ONE
    badly = await store.read("orders", 3, 9, max_count=1)
    assert badly.status is ReadStatus.OFFSET_OVERFLOW_BADLY
    assert badly.next_queue_offset == 2
    assert (await store.read("nope", 0, 0, max_count=1)).status is ReadStatus.NO_SUCH_QUEUE
    assert (await store.read("orders", 99, 0, max_count=1)).status is ReadStatus.NO_SUCH_QUEUE
    bounds = await store.bounds("orders", 3)
    assert (bounds.min_queue_offset, bounds.max_queue_offset) == (0, 2)


async def test_a_bad_message_fails_the_whole_batch_and_writes_nothing(store: StoreApi) -> None:
    await store.append([_msg(0, b"before")])
    before = await store.info()
    bad_batches = [
        ([_msg(0, b"ok"), _msg(0, b"")], EmptyBody),
        ([_msg(0, b"ok"), MessageToAppend("missing", 0, b"x")], UnknownTopic),
        ([_msg(0, b"ok"), MessageToAppend("orders", 17, b"x")], UnknownTopic),
        ([_msg(0, b"ok"), MessageToAppend("bad name", 0, b"x")], InvalidName),
        ([_msg(0, b"ok"), _msg(0, b"x" * (64 * 1024 + 1))], MessageTooLarge),
        ([_msg(0, b"ok"), _msg(0, b"x", bad="a\x01b")], InvalidArgument),
    ]
    for batch, error in bad_batches:
        with pytest.raises(error):
            await store.append(batch)
    after = await store.info()
    assert after.max_physical_offset == before.max_physical_offset
    assert (await store.bounds("orders", 0)).max_queue_offset == 1
    with pytest.raises(InvalidArgument):
        await store.append([])


async def test_bad_read_arguments_are_refused(store: StoreApi) -> None:
    for kwargs in ({"max_count": 0}, {"max_count": 5000}, {"max_count": 10, "max_scan": 5}):
        with pytest.raises(InvalidArgument):
            await store.read("orders", 0, 0, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="malformed tag filter"):
        await store.read("orders", 0, 0, max_count=1, tag_filter="A||")


async def test_system_topics_are_created_on_first_append(store: StoreApi) -> None:
    await store.append(
        [MessageToAppend("%RETRY%g1+orders", 0, b"r"), MessageToAppend("%DLQ%g1", 0, b"d")]
    )
    names = {t.name for t in await store.topics()}
    assert {"%RETRY%g1+orders", "%DLQ%g1"} <= names
    revive = [t for t in await store.topics() if t.name.startswith("rmq_sys_REVIVE_LOG_")]
    assert len(revive) == 1
    assert revive[0].queue_nums == 8


async def test_arrivals_announce_dispatched_entries(store: StoreApi) -> None:
    stream = store.arrivals()
    await store.append([_msg(2, b"wake", tag="T")])
    arrival = await asyncio.wait_for(anext(stream), timeout=5)
    assert (arrival.topic, arrival.queue_id, arrival.queue_offset) == ("orders", 2, 0)
    assert arrival.tag_hash != 0
    await stream.aclose()  # type: ignore[attr-defined]


async def test_arrivals_announce_a_batch_once_per_queue_by_its_last_entry(
    store: StoreApi,
) -> None:
    stream = store.arrivals()
    await store.append([_msg(2, b"a"), _msg(2, b"b"), _msg(3, b"c"), _msg(2, b"d")])
    first = await asyncio.wait_for(anext(stream), timeout=5)
    second = await asyncio.wait_for(anext(stream), timeout=5)
    assert [(a.queue_id, a.queue_offset) for a in (first, second)] == [(2, 2), (3, 0)]
    await store.append([_msg(3, b"e")])
    third = await asyncio.wait_for(anext(stream), timeout=5)
    assert (third.queue_id, third.queue_offset) == (3, 1)  # nothing else was announced between
    await stream.aclose()  # type: ignore[attr-defined]


async def test_arrivals_of_one_topic_leave_the_others_out(store: StoreApi) -> None:
    stream = store.arrivals("%RETRY%g1+orders")
    await store.append([_msg(1, b"other"), MessageToAppend("%RETRY%g1+orders", 0, b"r")])
    await store.append([_msg(2, b"other again")])
    await store.append([MessageToAppend("%RETRY%g1+orders", 0, b"r2")])
    first = await asyncio.wait_for(anext(stream), timeout=5)
    second = await asyncio.wait_for(anext(stream), timeout=5)
    assert [(a.topic, a.queue_offset) for a in (first, second)] == [
        ("%RETRY%g1+orders", 0),
        ("%RETRY%g1+orders", 1),
    ]
    await stream.aclose()  # type: ignore[attr-defined]


async def test_concurrent_appenders_get_distinct_dense_offsets(store: StoreApi) -> None:
    async def writer(n: int) -> list[int]:
        out = []
        for i in range(25):
            (r,) = await store.append([_msg(1, f"{n}-{i}".encode())])
            out.append(r.queue_offset)
        return out

    results = await asyncio.gather(*(writer(n) for n in range(8)))
    offsets = sorted(o for chunk in results for o in chunk)
    assert offsets == list(range(200))
    info = await store.info()
    assert info.flushed_physical_offset <= info.max_physical_offset


async def test_topic_queues_never_shrink(store: StoreApi) -> None:
    grown = await store.put_topic(TopicConfig("orders", 6, 6))
    assert grown.queue_nums == 6
    with pytest.raises(QueueShrinkRefused, match="refusing to shrink"):
        await store.put_topic(TopicConfig("orders", 2, 2))
    assert {t.name: t.queue_nums for t in await store.topics()}["orders"] == 6
