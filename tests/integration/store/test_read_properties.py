"""Properties of reads on a real store: offsets are dense and filters are exact.

For any sequence of tagged appends over a few queues, any tag filter and any page
size, paging through a queue from offset 0 returns exactly the matching messages
of that queue, in append order, and ``next_queue_offset`` only moves forward.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from popbroker.store.api import PROPERTY_TAGS, MessageToAppend, ReadStatus, TopicConfig
from popbroker.store.local import LocalStore
from tests.storesettings import small_settings

TAGS = ["", "A", "B", "C"]
appends = st.lists(st.tuples(st.integers(0, 2), st.sampled_from(TAGS)), min_size=1, max_size=120)
filters_ = st.sampled_from(["*", "A", "B||C", "A||B||C", "Z"])


def _matches(expression: str, tag: str) -> bool:
    return expression == "*" or tag in expression.split("||")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=appends,
    expression=filters_,
    page=st.integers(1, 9),
    scan=st.integers(9, 40),
    batch=st.integers(1, 17),
)
def test_paging_returns_exactly_the_matching_messages(
    plan: list[tuple[int, str]], expression: str, page: int, scan: int, batch: int
) -> None:
    asyncio.run(_check(plan, expression, page, scan, batch))


async def _check(
    plan: list[tuple[int, str]], expression: str, page: int, scan: int, batch: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore.open(Path(tmp), small_settings())
        try:
            await store.put_topic(TopicConfig("t", 3, 3))
            messages = [
                MessageToAppend("t", q, f"{i}".encode(), {PROPERTY_TAGS: tag} if tag else {})
                for i, (q, tag) in enumerate(plan)
            ]
            for start in range(0, len(messages), batch):
                results = await store.append(messages[start : start + batch])
                assert [r.queue_offset for r in results] == [
                    sum(1 for q, _ in plan[:j] if q == plan[j][0])
                    for j in range(start, start + len(results))
                ]
            for queue in range(3):
                expected = [
                    i for i, (q, tag) in enumerate(plan) if q == queue and _matches(expression, tag)
                ]
                got: list[int] = []
                offset = 0
                for _ in range(len(plan) + 2):
                    result = await store.read(
                        "t", queue, offset, max_count=page, tag_filter=expression, max_scan=scan
                    )
                    if result.status in (
                        ReadStatus.OFFSET_OVERFLOW_ONE,
                        ReadStatus.NO_MESSAGE_IN_QUEUE,
                    ):
                        break
                    assert result.next_queue_offset > offset
                    assert len(result.messages) <= page
                    got += [int(m.body) for m in result.messages]
                    offset = result.next_queue_offset
                assert got == expected
        finally:
            await store.close()
