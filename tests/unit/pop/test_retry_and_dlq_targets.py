"""Retry/DLQ names and the retry-or-DLQ decision (upstream #17, #18, #8332)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.pop import errors, retrytopics

names = st.from_regex(r"[A-Za-z0-9_%-]{1,20}", fullmatch=True).filter(
    lambda n: not n.startswith(("%RETRY%", "%DLQ%"))
)


def test_v2_names() -> None:
    assert retrytopics.retry_topic("billing", "orders") == "%RETRY%billing+orders"
    assert retrytopics.dlq_topic("billing") == "%DLQ%billing"
    assert retrytopics.parse_retry_topic("%RETRY%billing+orders") == ("billing", "orders")
    assert retrytopics.original_topic("%RETRY%billing+orders") == "orders"
    assert retrytopics.original_topic("orders") == "orders"


def test_v1_collision_cannot_happen_with_v2_names_upstream_17() -> None:
    # v1: ("g_a", "t") and ("g", "a_t") both give %RETRY%g_a_t.
    assert retrytopics.retry_topic("g_a", "t") != retrytopics.retry_topic("g", "a_t")


@settings(max_examples=300, deadline=None)
@given(names, names, names, names)
def test_distinct_group_topic_pairs_never_share_a_retry_topic_upstream_17(
    g1: str, t1: str, g2: str, t2: str
) -> None:
    same_name = retrytopics.retry_topic(g1, t1) == retrytopics.retry_topic(g2, t2)
    assert same_name == ((g1, t1) == (g2, t2))
    assert retrytopics.parse_retry_topic(retrytopics.retry_topic(g1, t1)) == (g1, t1)


def test_retry_of_a_retry_stays_in_the_same_topic() -> None:
    assert retrytopics.retry_topic("billing", "%RETRY%billing+orders") == "%RETRY%billing+orders"


@pytest.mark.parametrize(
    "bad", ["orders", "%RETRY%", "%RETRY%billing", "%RETRY%+orders", "%RETRY%g+", "%RETRY%g+a+b"]
)
def test_parse_refuses_non_v2_names(bad: str) -> None:
    with pytest.raises(errors.IllegalRetryTopic):
        retrytopics.parse_retry_topic(bad)


def test_plus_in_names_is_refused() -> None:
    with pytest.raises(errors.IllegalRetryTopic):
        retrytopics.retry_topic("a+b", "t")


def test_dlq_after_max_reconsume_times_upstream_18() -> None:
    retry = retrytopics.retry_or_dlq(group="billing", topic="orders", reconsume_times=15)
    assert (retry.topic, retry.reconsume_times, retry.dead_letter) == (
        "%RETRY%billing+orders",
        16,
        False,
    )
    dlq = retrytopics.retry_or_dlq(
        group="billing", topic="%RETRY%billing+orders", reconsume_times=16
    )
    assert (dlq.topic, dlq.reconsume_times, dlq.dead_letter) == ("%DLQ%billing", 17, True)


def test_max_reconsume_zero_goes_straight_to_dlq_upstream_8332() -> None:
    target = retrytopics.retry_or_dlq(
        group="g", topic="t", reconsume_times=0, max_reconsume_times=0
    )
    assert target.dead_letter


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40))
def test_a_message_is_delivered_at_most_max_plus_one_times(max_reconsume: int) -> None:
    deliveries = 1
    reconsume_times = 0
    topic = "orders"
    while True:
        target = retrytopics.retry_or_dlq(
            group="g",
            topic=topic,
            reconsume_times=reconsume_times,
            max_reconsume_times=max_reconsume,
        )
        if target.dead_letter:
            break
        deliveries += 1
        topic, reconsume_times = target.topic, target.reconsume_times
    assert deliveries == max_reconsume + 1


def test_negative_reconsume_is_refused() -> None:
    with pytest.raises(errors.IllegalReconsumeTimes):
        retrytopics.retry_or_dlq(group="g", topic="t", reconsume_times=-1)


@pytest.mark.parametrize(
    ("delivered_times", "max_reconsume_times", "expected"),
    [(0, 0, False), (1, 0, True), (16, 16, False), (17, 16, True), (3, 2, True)],
)
def test_exhausted_when_delivered_more_than_max_reconsume_times(
    delivered_times: int, max_reconsume_times: int, expected: bool
) -> None:
    assert retrytopics.exhausted(delivered_times, max_reconsume_times) is expected


def test_exhausted_refuses_negative_counts() -> None:
    with pytest.raises(errors.IllegalReconsumeTimes):
        retrytopics.exhausted(-1, 16)
    with pytest.raises(errors.IllegalReconsumeTimes):
        retrytopics.exhausted(1, -1)


def test_dead_letter_copy_keeps_properties_and_sets_origin_once() -> None:
    first = retrytopics.dead_letter(
        group="billing", original_topic="orders", properties={"K": "v"}, delivered_times=4
    )
    assert first == retrytopics.DeadLetter(
        topic="%DLQ%billing",
        queue_id=0,
        properties={"K": "v", "ORIGIN_TOPIC": "orders"},
        reconsume_times=4,
    )
    later = retrytopics.dead_letter(
        group="billing",
        original_topic="other",
        properties={"ORIGIN_TOPIC": "orders"},
        delivered_times=1,
    )
    assert later.properties == {"ORIGIN_TOPIC": "orders"}
    with pytest.raises(errors.IllegalReconsumeTimes):
        retrytopics.dead_letter(group="g", original_topic="t", properties={}, delivered_times=-1)
