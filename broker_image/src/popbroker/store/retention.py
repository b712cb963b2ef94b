"""Retention planning: which commit-log segments may go.

Pure: the caller passes the segments (base, size, last write time), the active
segment, ``now_ms`` and the policy; ``plan`` returns the bases to delete, oldest
first. Only whole segments go, never the active one, and always a prefix of the
log (deleting from the middle would leave consume-queue entries pointing nowhere).

A segment is expired when its last write is older than ``retention_ms``; while the
log is over ``max_bytes`` (0 = unlimited) the oldest segments go as well. The
caller (``popbroker.store.local``) then advances consume-queue minimums and logs,
per group, every committed offset that the deletion overtakes: data a live group
has not consumed is never removed silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    base: int
    size: int
    last_write_ms: int


def plan(
    segments: Sequence[SegmentFacts],
    *,
    active_base: int,
    now_ms: int,
    retention_ms: int,
    max_bytes: int,
) -> list[int]:
    """Bases of the segments to delete, oldest first (always a prefix)."""
    ordered = sorted(segments, key=lambda s: s.base)
    total = sum(s.size for s in ordered)
    doomed: list[int] = []
    for segment in ordered:
        if segment.base >= active_base:
            break
        expired = now_ms - segment.last_write_ms > retention_ms
        oversize = max_bytes > 0 and total > max_bytes
        if not (expired or oversize):
            break
        doomed.append(segment.base)
        total -= segment.size
    return doomed
