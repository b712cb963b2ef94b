"""Tag hashes and tag filters.

A consume-queue entry carries a 64-bit hash of the message's tag so a read can
skip non-matching entries without touching the commit log. Hashes can collide, so
a match on the hash is confirmed against the real tag after the record is read.

Filter syntax (RocketMQ's TAG type): ``*`` or empty matches everything, including
untagged messages; ``A||B`` matches messages tagged ``A`` or ``B``. Untagged
messages hash to 0 and match only ``*``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from popbroker.store.errors import InvalidArgument

NO_TAG_HASH = 0


def tag_hash(tag: str) -> int:
    """A stable signed 64-bit hash of ``tag`` (0 for no tag)."""
    if not tag:
        return NO_TAG_HASH
    digest = hashlib.blake2b(tag.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "big", signed=True)
    return value if value != NO_TAG_HASH else 1


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed filter expression. ``tags`` is empty for "match all"."""

    tags: frozenset[str]

    @property
    def matches_all(self) -> bool:
        return not self.tags

    @property
    def hashes(self) -> frozenset[int]:
        return frozenset(tag_hash(t) for t in self.tags)

    def matches_hash(self, hashed: int, hashes: frozenset[int]) -> bool:
        return self.matches_all or hashed in hashes

    def matches_tag(self, tag: str) -> bool:
        return self.matches_all or tag in self.tags


MATCH_ALL = TagFilter(frozenset())


def parse_filter(expression: str) -> TagFilter:
    """Parse ``*``, empty, or ``A||B``; raise ``InvalidArgument`` on a malformed one."""
    text = expression.strip()
    if text in ("", "*"):
        return MATCH_ALL
    parts = [p.strip() for p in text.split("||")]
    if any(not p for p in parts):
        raise InvalidArgument(f"malformed tag filter {expression!r}: empty alternative")
    if "*" in parts:
        return MATCH_ALL
    return TagFilter(frozenset(parts))
