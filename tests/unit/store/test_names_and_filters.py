"""Topic/group names, system topic names, tag hashes and tag filters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.store import filters, names
from popbroker.store.errors import InvalidArgument, InvalidName


@pytest.mark.parametrize("name", ["orders", "a", "A-b_c%", "x" * 127])
def test_legal_names_pass(name: str) -> None:
    assert names.validate_name(name, kind="topic") == name


@pytest.mark.parametrize("name", ["", "x" * 128, "a b", "a+b", "é", "a/b", "..", "a\nb"])
def test_illegal_names_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(InvalidName, match=r"must match"):
        names.validate_name(name, kind="topic")


@pytest.mark.parametrize("name", ["%RETRY%g+t", "%DLQ%g", "rmq_sys_REVIVE_LOG_c"])
def test_reserved_prefixes_are_refused_for_user_names(name: str) -> None:
    with pytest.raises(InvalidName, match="reserved"):
        names.validate_name(name, kind="topic")


def test_system_topic_names() -> None:
    assert names.revive_topic("c1") == "rmq_sys_REVIVE_LOG_c1"
    assert names.retry_topic("g", "t") == "%RETRY%g+t"
    assert names.dlq_topic("g") == "%DLQ%g"


@settings(max_examples=200, deadline=None)
@given(
    group=st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True),
    topic=st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True),
)
def test_retry_names_parse_back_to_exactly_their_pair(group: str, topic: str) -> None:
    retry = names.retry_topic(group, topic)
    assert names.parse_retry_topic(retry) == (group, topic)
    assert names.validate_topic_for_append(retry) == retry


def test_underscore_names_never_collide_in_retry_topics() -> None:
    # upstream #7543: v1 names %RETRY%g_a + t and g + a_t collided
    assert names.retry_topic("g_a", "t") != names.retry_topic("g", "a_t")


def test_malformed_system_names_are_refused_for_append() -> None:
    for bad in ("%RETRY%nogroup", "%RETRY%+t", "%DLQ%", "%DLQ%a b"):
        with pytest.raises(InvalidName):
            names.validate_topic_for_append(bad)


def test_tag_hash_is_stable_and_zero_only_for_no_tag() -> None:
    assert filters.tag_hash("") == filters.NO_TAG_HASH
    assert filters.tag_hash("A") == filters.tag_hash("A") != 0
    assert filters.tag_hash("A") != filters.tag_hash("B")


@pytest.mark.parametrize("expr", ["", "*", "  *  ", "A||*"])
def test_match_all_filters(expr: str) -> None:
    parsed = filters.parse_filter(expr)
    assert parsed.matches_all
    assert parsed.matches_tag("")
    assert parsed.matches_tag("anything")


def test_or_filter_matches_only_named_tags() -> None:
    parsed = filters.parse_filter("A || B")
    assert parsed.tags == {"A", "B"}
    assert parsed.matches_tag("A")
    assert parsed.matches_tag("B")
    assert not parsed.matches_tag("C")
    assert not parsed.matches_tag("")  # untagged messages match only *
    assert parsed.matches_hash(filters.tag_hash("B"), parsed.hashes)
    assert not parsed.matches_hash(filters.NO_TAG_HASH, parsed.hashes)


@pytest.mark.parametrize("expr", ["A||", "||B", "A||||B"])
def test_malformed_filters_are_refused(expr: str) -> None:
    with pytest.raises(InvalidArgument, match="malformed tag filter"):
        filters.parse_filter(expr)
