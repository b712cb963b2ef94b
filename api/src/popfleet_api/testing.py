"""``InMemoryBrokerAdmin``: a :class:`~popfleet_api.client.BrokerAdminApi` without a broker.

For the unit tests of the operator and the audit jobs (STYLE §5: in-memory
implementations of the same Protocol, never ``mock.patch``). It keeps the
declared state of one broker and refuses what a broker refuses, with the same
error classes and reasons:

* names: ``^[%a-zA-Z0-9_-]{1,127}$`` without a reserved prefix (``%RETRY%``,
  ``%DLQ%``, ``rmq_sys_``) -- ``InvalidArgument``/``BAD_NAME``;
* counts: queues ``0..1024`` with at least one, max reconsume times
  ``0..1000``, ``pop_share_queue_num >= 0`` -- ``BAD_COUNT``;
* queue counts never shrink -- ``FailedPrecondition``/``QUEUE_SHRINK``;
* unknown topics and groups -- ``NotFound``/``UNKNOWN_TOPIC``, ``UNKNOWN_GROUP``;
* members: distinct non-empty names, ``HOST:PORT`` -- ``BAD_MEMBER``.

The contract suite (``tests/integration/admin/test_admin_contract.py``) runs
the same tests against this class and against a real broker, so the two agree.

Knobs for tests: ``unreachable`` (every call raises the retriable
``Unavailable``), ``fail_next`` (the next call raises that error),
``restart(keep_config=False)`` (a broker that came back empty: new config
epoch), ``commit_offset``/``set_queue_bounds``/``revive_records`` to seed what
the offset and revive APIs report. Retry-policy checks are the broker's alone.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from popfleet_api import errors, models

if TYPE_CHECKING:
    from popfleet_api import revivebatches

NAME_PATTERN = re.compile(r"[%a-zA-Z0-9_-]{1,127}")
RESERVED_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_")
MAX_QUEUES = 1024
MAX_RECONSUME_TIMES = 1000
MEMBER_NAME_PATTERN = re.compile(r"[a-zA-Z0-9._-]{1,253}")


def _check_name(name: str, *, kind: str) -> None:
    if name.startswith(RESERVED_PREFIXES) or not NAME_PATTERN.fullmatch(name):
        raise errors.InvalidArgument(f"{kind} name {name!r} is not valid", reason="BAD_NAME")


def _check_count(value: int, *, field: str, high: int = 2**31 - 1) -> None:
    if not 0 <= value <= high:
        raise errors.InvalidArgument(f"{field} {value} out of range 0..{high}", reason="BAD_COUNT")


class InMemoryBrokerAdmin:
    """One broker's admin API in memory (see the module docstring)."""

    def __init__(
        self,
        target: str = "memory:0",
        *,
        cluster: str = "popfleet",
        broker_name: str = "broker-0",
        revive_queue_num: int = 8,
        client_endpoint: str = "",
    ) -> None:
        self._target = target
        self.cluster = cluster
        self.broker_name = broker_name
        self.revive_queue_num = revive_queue_num
        self.client_endpoint = client_endpoint
        self.config_epoch = secrets.token_hex(8)
        self.now_ms = 0
        self.unreachable = False
        self.fail_next: errors.AdminError | None = None
        self.calls: list[str] = []
        self._topics: dict[str, models.Topic] = {}
        self._groups: dict[str, models.Group] = {}
        self._modes: dict[tuple[str, str], models.ConsumeModeSetting] = {}
        self._members: list[models.Member] = []
        self._offsets: dict[models.OffsetTableKey, int] = {}
        self._bounds: dict[tuple[str, int], tuple[int, int]] = {}
        self.revive_records: dict[int, list[models.ReviveRecord]] = {}
        self.closed = False
        # replication (test knobs): the other replicas of this broker's set, in sync (none:
        # replication off); the term it leads; every hand-over asked, with its successor
        self.followers: tuple[str, ...] = ()
        self.term = 1
        self.hand_overs: list[str] = []

    # ------------------------------------------------------------------ test knobs

    def restart(self, *, keep_config: bool = True) -> None:
        """Simulate a broker restart; without its config it comes back with a new epoch."""
        if not keep_config:
            self._topics.clear()
            self._groups.clear()
            self._modes.clear()
            self._members.clear()
            self._offsets.clear()
            self.config_epoch = secrets.token_hex(8)

    def commit_offset(self, *, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        self._offsets[models.OffsetTableKey(group, topic, queue_id)] = queue_offset

    def set_queue_bounds(self, topic: str, queue_id: int, *, low: int, high: int) -> None:
        self._bounds[(topic, queue_id)] = (low, high)

    def _enter(self, call: str) -> None:
        self.calls.append(call)
        if self.unreachable:
            raise errors.Unavailable("broker unreachable", target=self._target)
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure

    # ------------------------------------------------------------------ BrokerAdminApi

    @property
    def target(self) -> str:
        return self._target

    async def close(self) -> None:
        self.closed = True

    async def info(self) -> models.BrokerInfo:
        self._enter("info")
        mine = [m.endpoint for m in self._members if m.broker_name == self.broker_name]
        return models.BrokerInfo(
            version="in-memory",
            cluster=self.cluster,
            broker_name=self.broker_name,
            ready=True,
            config_epoch=self.config_epoch,
            client_endpoint=self.client_endpoint or (mine[0] if mine else ""),
            flush_mode=models.FlushMode.ASYNC,
            revive_queue_num=self.revive_queue_num,
            last_error="",
            now_ms=self.now_ms,
        )

    async def set_members(self, members: Sequence[models.Member]) -> list[models.Member]:
        self._enter("set_members")
        seen: set[str] = set()
        for member in members:
            host, sep, port = member.endpoint.rpartition(":")
            if (
                not MEMBER_NAME_PATTERN.fullmatch(member.broker_name)
                or member.broker_name in seen
                or not sep
                or not host
                or not port.isdigit()
                or not 0 < int(port) < 65536
                or any(c.isspace() for c in member.endpoint)
            ):
                raise errors.InvalidArgument(f"bad member {member}", reason="BAD_MEMBER")
            seen.add(member.broker_name)
        self._members = sorted(members, key=lambda m: m.broker_name)
        return list(self._members)

    async def members(self) -> list[models.Member]:
        self._enter("members")
        return list(self._members)

    async def hand_over(self, successor: str = "", *, timeout_ms: int = 0) -> models.HandOverResult:
        self._enter("hand_over")
        if not self.followers:
            raise errors.FailedPrecondition(
                "replication is off on this broker", reason="REPLICATION_OFF", target=self._target
            )
        chosen = successor or self.followers[0]
        if chosen not in self.followers:
            raise errors.FailedPrecondition(
                f"{chosen} is not an in-sync follower", reason="NO_SUCCESSOR", target=self._target
            )
        self.hand_overs.append(chosen)
        term, self.term = self.term, self.term + 1
        return models.HandOverResult(successor=chosen, term=term)

    async def put_topic(self, topic: models.Topic) -> models.PutTopicResult:
        self._enter("put_topic")
        _check_name(topic.name, kind="topic")
        _check_count(topic.read_queue_nums, field="read_queue_nums", high=MAX_QUEUES)
        _check_count(topic.write_queue_nums, field="write_queue_nums", high=MAX_QUEUES)
        if max(topic.read_queue_nums, topic.write_queue_nums) == 0:
            raise errors.InvalidArgument("a topic needs at least one queue", reason="BAD_COUNT")
        current = self._topics.get(topic.name)
        if current is not None and (
            topic.read_queue_nums < current.read_queue_nums
            or topic.write_queue_nums < current.write_queue_nums
        ):
            raise errors.FailedPrecondition(
                f"topic {topic.name!r} has {current.read_queue_nums} read and "
                f"{current.write_queue_nums} write queues; refusing to shrink",
                reason="QUEUE_SHRINK",
            )
        stored = replace(topic, system=False)
        self._topics[topic.name] = stored
        return models.PutTopicResult(topic=stored, created=current is None)

    async def delete_topic(self, name: str) -> None:
        self._enter("delete_topic")
        if name == f"rmq_sys_REVIVE_LOG_{self.cluster}":
            raise errors.FailedPrecondition(
                f"system topic {name!r} cannot be deleted", reason="SYSTEM_TOPIC"
            )
        if name not in self._topics:
            raise errors.NotFound(f"topic {name!r} does not exist", reason="UNKNOWN_TOPIC")
        del self._topics[name]
        self._modes = {k: v for k, v in self._modes.items() if k[1] != name}
        self._offsets = {k: v for k, v in self._offsets.items() if k.topic != name}

    async def topics(
        self, *, include_system: bool = False, names: Collection[str] | None = None
    ) -> list[models.Topic]:
        if names is not None and not names:
            return []
        self._enter("topics")
        topics = sorted(self._topics.values(), key=lambda t: t.name)
        if include_system:
            revive = models.Topic(
                f"rmq_sys_REVIVE_LOG_{self.cluster}",
                self.revive_queue_num,
                self.revive_queue_num,
                system=True,
            )
            topics = sorted([*topics, revive], key=lambda t: t.name)
        return [t for t in topics if names is None or t.name in names]

    async def put_group(self, group: models.Group) -> models.PutGroupResult:
        self._enter("put_group")
        _check_name(group.name, kind="group")
        _check_count(
            group.max_reconsume_times, field="max_reconsume_times", high=MAX_RECONSUME_TIMES
        )
        created = group.name not in self._groups
        self._groups[group.name] = group
        return models.PutGroupResult(group=group, created=created)

    async def delete_group(self, name: str) -> None:
        self._enter("delete_group")
        self._require_group(name)
        del self._groups[name]
        self._modes = {k: v for k, v in self._modes.items() if k[0] != name}
        self._offsets = {k: v for k, v in self._offsets.items() if k.group != name}

    async def groups(self, *, names: Collection[str] | None = None) -> list[models.Group]:
        if names is not None and not names:
            return []
        self._enter("groups")
        groups = sorted(self._groups.values(), key=lambda g: g.name)
        return [g for g in groups if names is None or g.name in names]

    def _require_group(self, name: str) -> None:
        if name not in self._groups:
            raise errors.NotFound(f"group {name!r} does not exist", reason="UNKNOWN_GROUP")

    def _require_topic(self, name: str) -> None:
        if name not in self._topics:
            raise errors.NotFound(f"topic {name!r} does not exist", reason="UNKNOWN_TOPIC")

    async def set_consume_mode(
        self,
        group: str,
        topic: str,
        *,
        mode: models.ConsumeMode,
        pop_share_queue_num: int = 0,
    ) -> models.ConsumeModeSetting:
        self._enter("set_consume_mode")
        _check_name(group, kind="group")
        _check_name(topic, kind="topic")
        _check_count(pop_share_queue_num, field="pop_share_queue_num")
        self._require_group(group)
        self._require_topic(topic)
        setting = models.ConsumeModeSetting(group, topic, mode, pop_share_queue_num, True)
        self._modes[(group, topic)] = setting
        return setting

    async def consume_mode(self, group: str, topic: str) -> models.ConsumeModeSetting:
        self._enter("consume_mode")
        _check_name(group, kind="group")
        _check_name(topic, kind="topic")
        self._require_group(group)
        self._require_topic(topic)
        default = models.ConsumeModeSetting(group, topic, models.ConsumeMode.PULL, 0, False)
        return self._modes.get((group, topic), default)

    async def consume_modes(self, group: str | None = None) -> list[models.ConsumeModeSetting]:
        self._enter("consume_modes")
        if group is not None:
            _check_name(group, kind="group")
            self._require_group(group)
        return [m for _, m in sorted(self._modes.items()) if group is None or m.group == group]

    async def offsets(self, group: str, topics: Sequence[str] = ()) -> models.GroupOffsets:
        self._enter("offsets")
        _check_name(group, kind="group")
        rows = {k: v for k, v in self._offsets.items() if k.group == group}
        if group not in self._groups and not rows:
            raise errors.NotFound(f"group {group!r} does not exist", reason="UNKNOWN_GROUP")
        for name in topics:
            self._require_topic(name)
        modes = {t for (g, t) in self._modes if g == group}
        wanted = sorted(set(topics) or ({k.topic for k in rows} | modes) & set(self._topics))
        queues = []
        for name in wanted:
            topic = self._topics[name]
            for queue_id in range(max(topic.read_queue_nums, topic.write_queue_nums)):
                low, high = self._bounds.get((name, queue_id), (0, 0))
                queues.append(
                    models.QueueOffsets(
                        topic=name,
                        queue_id=queue_id,
                        min_queue_offset=low,
                        max_queue_offset=high,
                        committed_queue_offset=rows.get(
                            models.OffsetTableKey(group, name, queue_id)
                        ),
                        in_flight_messages=None,
                        oldest_unconsumed_store_time_ms=None,
                    )
                )
        return models.GroupOffsets(group=group, queues=tuple(queues), now_ms=self.now_ms)

    async def revive_stats(self) -> models.ReviveStats:
        self._enter("revive_stats")
        queues = tuple(
            models.ReviveQueueStats(
                revive_queue_id=q,
                min_queue_offset=0,
                max_queue_offset=len(self.revive_records.get(q, [])),
                revive_queue_offset=None,
                lag_messages=len(self.revive_records.get(q, [])),
                lag_ms=0,
                ledger=None,
            )
            for q in range(self.revive_queue_num)
        )
        groups = tuple(models.GroupRetryStats(g, 0, 0) for g in sorted(self._groups))
        return models.ReviveStats(
            revive_topic=f"rmq_sys_REVIVE_LOG_{self.cluster}",
            queues=queues,
            groups=groups,
            checkpoint_buffer=None,
            now_ms=self.now_ms,
        )

    async def scan_revive_log(
        self,
        revive_queue_id: int,
        *,
        from_queue_offset: int = 0,
        page_size: int = 0,
        max_records: int = 0,
    ) -> AsyncIterator[models.ReviveLogPage]:
        self._enter("scan_revive_log")
        if revive_queue_id < 0 or from_queue_offset < 0 or max_records < 0:
            raise errors.InvalidArgument("negative scan argument", reason="BAD_COUNT")
        if not 0 <= page_size <= 1024:
            raise errors.InvalidArgument("page_size out of range 0..1024", reason="BAD_COUNT")
        if revive_queue_id >= self.revive_queue_num:
            raise errors.NotFound("no such revive queue", reason="UNKNOWN_REVIVE_QUEUE")
        log = self.revive_records.get(revive_queue_id, [])
        if from_queue_offset > len(log):
            raise errors.OutOfRange("beyond the end of the log", reason="BEYOND_END")
        size = page_size or 256
        position = from_queue_offset
        remaining = max_records or None
        while True:
            count = size if remaining is None else min(size, remaining)
            chunk = tuple(log[position : position + count])
            position += len(chunk)
            if remaining is not None:
                remaining -= len(chunk)
            end = position >= len(log)
            yield models.ReviveLogPage(revive_queue_id, chunk, position, 0, len(log), end)
            if end or not chunk or remaining == 0:
                return

    async def scan_revive_log_batches(
        self,
        revive_queue_id: int,
        *,
        from_queue_offset: int = 0,
        batch_records: int = 0,
        max_records: int = 0,
    ) -> AsyncIterator[revivebatches.ReviveLogBatch]:
        from popfleet_api import revivebatches  # noqa: PLC0415 - pyarrow only for batch readers

        async for page in self.scan_revive_log(
            revive_queue_id,
            from_queue_offset=from_queue_offset,
            page_size=min(batch_records or 1024, 1024),
            max_records=max_records,
        ):
            yield revivebatches.ReviveLogBatch(
                revive_queue_id=page.revive_queue_id,
                records=revivebatches.batch_from_records(page.records),
                next_queue_offset=page.next_queue_offset,
                min_queue_offset=page.min_queue_offset,
                max_queue_offset=page.max_queue_offset,
                end_of_log=page.end_of_log,
            )

    async def scan_offsets(
        self,
        *,
        group: str | None = None,
        start_after: models.OffsetTableKey | None = None,
        page_size: int = 0,
        include_store_times: bool = False,
    ) -> AsyncIterator[models.OffsetTablePage]:
        self._enter("scan_offsets")
        if not 0 <= page_size <= 1024:
            raise errors.InvalidArgument("page_size out of range 0..1024", reason="BAD_COUNT")
        if group is not None and not NAME_PATTERN.fullmatch(group):
            raise errors.InvalidArgument(f"group name {group!r} is not valid", reason="BAD_NAME")
        keys = sorted(k for k in self._offsets if group is None or k.group == group)
        if group is not None and not keys and group not in self._groups:
            raise errors.NotFound(f"group {group!r} does not exist", reason="UNKNOWN_GROUP")
        if start_after is not None:
            keys = [k for k in keys if k > start_after]
        if not keys:
            yield models.OffsetTablePage(rows=(), resume_after=None, end_of_table=True)
            return
        size = page_size or 256
        for start in range(0, len(keys), size):
            chunk = keys[start : start + size]
            rows = []
            for key in chunk:
                exists = key.topic in self._topics
                low, high = self._bounds.get((key.topic, key.queue_id), (0, 0))
                rows.append(
                    models.OffsetTableRow(
                        key=key,
                        committed_queue_offset=self._offsets[key],
                        min_queue_offset=low if exists else 0,
                        max_queue_offset=high if exists else 0,
                        queue_exists=exists,
                        in_flight_messages=None,
                        oldest_unconsumed_store_time_ms=None,
                    )
                )
            yield models.OffsetTablePage(
                rows=tuple(rows), resume_after=chunk[-1], end_of_table=start + size >= len(keys)
            )

    async def serving(self) -> bool:
        self._enter("serving")
        return True
