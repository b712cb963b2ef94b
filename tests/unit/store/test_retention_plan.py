"""Which commit-log segments retention deletes (popbroker.store.retention.plan)."""

from __future__ import annotations

from popbroker.store.retention import SegmentFacts, plan

HOUR_MS = 3_600_000


def _segments(ages_h: list[float], now_ms: int, size: int = 100) -> list[SegmentFacts]:
    return [SegmentFacts(i * size, size, now_ms - int(a * HOUR_MS)) for i, a in enumerate(ages_h)]


def test_expired_prefix_goes_active_segment_stays() -> None:
    now = 1000 * HOUR_MS
    segs = _segments([80, 75, 10, 90], now)
    doomed = plan(segs, active_base=300, now_ms=now, retention_ms=72 * HOUR_MS, max_bytes=0)
    assert doomed == [0, 100]  # stops at the first young segment; never the active one


def test_only_a_prefix_is_deleted_even_if_later_segments_are_old() -> None:
    now = 1000 * HOUR_MS
    segs = _segments([1, 80, 80], now)
    assert plan(segs, active_base=200, now_ms=now, retention_ms=72 * HOUR_MS, max_bytes=0) == []


def test_size_limit_deletes_oldest_until_under_limit() -> None:
    now = 1000 * HOUR_MS
    segs = _segments([1, 1, 1, 1], now)
    doomed = plan(segs, active_base=300, now_ms=now, retention_ms=72 * HOUR_MS, max_bytes=250)
    assert doomed == [0, 100]


def test_nothing_to_delete_with_a_single_segment() -> None:
    now = 1000 * HOUR_MS
    assert plan(_segments([500], now), active_base=0, now_ms=now, retention_ms=1, max_bytes=1) == []
