"""format.decode_span: many records checked at once say what decode_fields says one by one.

Records with random topics (multi-byte UTF-8 too), hosts, properties and bodies are laid
out with random gaps, as a queue's records lie in the commit log between other queues'
ones. The span decoder returns the same columns as the per-record decoder, and any
damage inside a record (a flipped byte, a wrong position, a cut span) makes it return
None -- the caller then decodes record by record, which names the damaged record --
while damage in a gap changes nothing.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.store import format as fmt

_NAMES = st.text(
    st.characters(codec="utf-8", blacklist_characters="\x00\x01\x02"),
    min_size=1,
    max_size=20,
)
_RECORDS = st.lists(
    st.tuples(
        _NAMES,  # topic
        st.dictionaries(
            _NAMES,
            st.text(
                st.characters(codec="utf-8", blacklist_characters="\x01\x02"),
                max_size=8,
            ),
            max_size=3,
        ),
        st.binary(max_size=64),  # body
        st.integers(0, 40),  # gap before the record
    ),
    min_size=1,
    max_size=12,
)
BASE = 1 << 20  # where the span was read


def _span(
    specs: list[tuple[str, dict[str, str], bytes, int]],
) -> tuple[bytes, list[tuple[int, int]]]:
    span, extents = b"", []
    for index, (topic, properties, body, gap) in enumerate(specs):
        span += b"\xee" * (gap if index else 0)
        raw = fmt.encode_record(
            physical_offset=BASE + len(span),
            queue_id=index % 4,
            queue_offset=100 + index,
            flags=0,
            born_timestamp_ms=5,
            store_timestamp_ms=1_000 + index,
            reconsume_times=0,
            topic=topic.encode()[:255],
            born_host="hôst:1".encode(),
            properties=fmt.encode_properties(properties),
            body=body,
        )
        extents.append((BASE + len(span), len(raw)))
        span += raw
    return span, extents


def _one_by_one(span: bytes, extents: list[tuple[int, int]]) -> fmt.SpanColumns:
    fields = [
        fmt.decode_fields(span[p - BASE : p - BASE + n], expected_physical_offset=p)
        for p, n in extents
    ]
    return fmt.SpanColumns(
        [f[2] for f in fields], [f[3] for f in fields], [f[6] for f in fields],
        [f[8] for f in fields], [f[10] for f in fields], [f[11] for f in fields],
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(_RECORDS)
def test_a_span_decodes_as_its_records_do(
    specs: list[tuple[str, dict[str, str], bytes, int]],
) -> None:
    span, extents = _span(specs)
    assert fmt.decode_span(span, extents, span_position=BASE) == _one_by_one(span, extents)


@settings(max_examples=300, deadline=None)
@given(_RECORDS, st.data())
def test_damage_inside_a_record_is_never_decoded(
    specs: list[tuple[str, dict[str, str], bytes, int]], data: st.DataObject
) -> None:
    span, extents = _span(specs)
    at = data.draw(st.integers(0, len(span) - 1))
    damaged = bytearray(span)
    damaged[at] ^= data.draw(st.integers(1, 255))
    inside = any(p - BASE <= at < p - BASE + n for p, n in extents)
    got = fmt.decode_span(bytes(damaged), extents, span_position=BASE)
    if inside:
        assert got is None
    else:
        assert got == _one_by_one(span, extents)


def test_a_wrong_position_or_a_cut_span_is_refused() -> None:
    span, extents = _span([("t", {"TAGS": "a"}, b"{}", 0), ("t", {}, b"x", 3)])
    assert fmt.decode_span(span, extents, span_position=BASE + 1) is None
    assert fmt.decode_span(span[:-1], extents, span_position=BASE) is None
    shifted = [(p, n) for p, n in extents[:1]] + [(extents[1][0] - 1, extents[1][1])]
    assert fmt.decode_span(span, shifted, span_position=BASE) is None
    assert fmt.decode_span(span, [], span_position=BASE) == fmt.SpanColumns([], [], [], [], [], [])
