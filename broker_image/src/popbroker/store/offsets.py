"""The consumer offset table: (group, topic, queue) -> committed queue offset.

Committed offsets move in memory on every commit and are persisted by the store
every ``offsets_persist_interval_ms`` and at shutdown (RocketMQ does the same every
5 s). After a crash they may lag by that interval, which only ever causes
re-delivery, never loss: a committed offset is a promise that everything below it
is handed off (DESIGN §3.2), and a lagging promise is a weaker one.

``commit`` keeps no monotonic guard, as upstream: a server-side reset moves it
back on purpose. It logs when an offset goes backwards so surprises are visible.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from popbroker.store.api import CommittedOffset
from popbroker.store.errors import InvalidArgument

log = logging.getLogger(__name__)

Key = tuple[str, str, int]  # group, topic, queue_id


@dataclass(slots=True)
class OffsetTable:
    """In-memory table with a dirty flag for the persister, and a version that moves on
    every change (a leader sends the table to its followers when it moved: issue 18)."""

    offsets: dict[Key, int] = field(default_factory=dict)
    dirty: bool = False
    version: int = 0

    def _changed(self) -> None:
        self.dirty = True
        self.version += 1

    def commit(self, *, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        if queue_offset < 0 or queue_id < 0:
            raise InvalidArgument("queue id and queue offset must be >= 0")
        key = (group, topic, queue_id)
        previous = self.offsets.get(key)
        if previous is not None and queue_offset < previous:
            log.info("offset of %s moves back from %d to %d", key, previous, queue_offset)
        if previous != queue_offset:
            self.offsets[key] = queue_offset
            self._changed()

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get((group, topic, queue_id))

    def rows(self, group: str | None = None) -> list[CommittedOffset]:
        return [
            CommittedOffset(group=g, topic=t, queue_id=q, queue_offset=o)
            for (g, t, q), o in sorted(self.offsets.items())
            if group is None or g == group
        ]

    def delete(self, group: str, topic: str | None = None) -> None:
        for key in [k for k in self.offsets if k[0] == group and (topic is None or k[1] == topic)]:
            del self.offsets[key]
            self._changed()

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.offsets if k[1] == topic]:
            del self.offsets[key]
            self._changed()

    def replace(self, other: OffsetTable) -> None:
        """Take ``other``'s rows (a follower taking its leader's table)."""
        if other.offsets != self.offsets:
            self.offsets = dict(other.offsets)
            self._changed()

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "offsets": [[g, t, q, o] for (g, t, q), o in sorted(self.offsets.items())],
        }

    @classmethod
    def from_json(cls, raw: Any) -> OffsetTable:
        try:
            if raw.get("version") != 1:
                raise InvalidArgument(f"unsupported offsets version {raw.get('version')!r}")
            table = cls()
            for g, t, q, o in raw["offsets"]:
                table.offsets[(str(g), str(t), int(q))] = int(o)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidArgument(f"malformed offsets file: {exc!r}") from exc
        return table
