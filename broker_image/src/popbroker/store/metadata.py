"""The broker's declared configuration: topics, groups, consume modes, cluster members.

Held in memory as one ``Metadata`` object and persisted as ``config/metadata.json``
through ``atomicfiles`` after every change; concurrent changes share one rewrite
(``LocalStore`` group-commits them, and answers a change only once a file holding
it is fsynced). The **config epoch** is a random token
that changes whenever the store starts from an empty or restored (backup)
configuration; the operator compares it with what it saw last and re-applies
everything declared when it differs (DESIGN §3.5, §4).

Rules kept here (pure, no I/O):

* topics never lose queues (``QueueShrinkRefused``);
* user names are validated; system topics (revive log, retry, DLQ) are created
  by the store itself through ``ensure_system_topic``;
* a consume mode may name a group or topic that does not exist yet (the operator
  may apply them in any order), but its name must be valid.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from popbroker.store.api import (
    ClusterMember,
    ConsumeMode,
    ConsumeModeConfig,
    GroupConfig,
    MessageType,
    Permission,
    RetryPolicy,
    TopicConfig,
)
from popbroker.store.errors import InvalidArgument, QueueShrinkRefused
from popbroker.store.names import validate_name, validate_topic_for_append

MAX_QUEUES = 1024
FORMAT_VERSION = 1


def new_epoch() -> str:
    return secrets.token_hex(8)


def _check_topic(topic: TopicConfig) -> None:
    for label, count in (("read", topic.read_queue_nums), ("write", topic.write_queue_nums)):
        if not 0 <= count <= MAX_QUEUES:
            raise InvalidArgument(f"{label} queue count {count} out of range 0..{MAX_QUEUES}")
    if topic.queue_nums == 0:
        raise InvalidArgument("a topic needs at least one queue")


@dataclass(slots=True)
class Metadata:
    """Mutable in-memory configuration; the store serialises access under its lock."""

    epoch: str = field(default_factory=new_epoch)
    topics: dict[str, TopicConfig] = field(default_factory=dict)
    groups: dict[str, GroupConfig] = field(default_factory=dict)
    modes: dict[tuple[str, str], ConsumeModeConfig] = field(default_factory=dict)
    members: tuple[ClusterMember, ...] = ()

    # -- topics ----------------------------------------------------------------

    def put_topic(self, topic: TopicConfig) -> TopicConfig:
        validate_name(topic.name, kind="topic")
        _check_topic(topic)
        current = self.topics.get(topic.name)
        if current is not None and topic.queue_nums < current.queue_nums:
            raise QueueShrinkRefused(
                f"topic {topic.name!r} has {current.queue_nums} queues; "
                f"refusing to shrink to {topic.queue_nums}"
            )
        self.topics[topic.name] = topic
        return topic

    def ensure_system_topic(self, name: str, queue_nums: int) -> TopicConfig:
        """Create (or grow) a system topic; never shrinks."""
        validate_topic_for_append(name)
        current = self.topics.get(name)
        if current is not None and current.queue_nums >= queue_nums:
            return current
        topic = TopicConfig(name=name, read_queue_nums=queue_nums, write_queue_nums=queue_nums)
        self.topics[name] = topic
        return topic

    def delete_topic(self, name: str) -> bool:
        existed = self.topics.pop(name, None) is not None
        for key in [k for k in self.modes if k[1] == name]:
            del self.modes[key]
        return existed

    # -- groups ------------------------------------------------------------------

    def put_group(self, group: GroupConfig) -> GroupConfig:
        validate_name(group.name, kind="group")
        if not 0 <= group.max_reconsume_times <= 1000:
            raise InvalidArgument("max_reconsume_times must be in 0..1000")
        self.groups[group.name] = group
        return group

    def delete_group(self, name: str) -> bool:
        existed = self.groups.pop(name, None) is not None
        for key in [k for k in self.modes if k[0] == name]:
            del self.modes[key]
        return existed

    # -- consume modes -----------------------------------------------------------

    def put_mode(self, mode: ConsumeModeConfig) -> ConsumeModeConfig:
        validate_name(mode.group, kind="group")
        validate_name(mode.topic, kind="topic")
        if mode.pop_share_queue_num < 0:
            raise InvalidArgument("pop_share_queue_num must be >= 0")
        self.modes[(mode.group, mode.topic)] = mode
        return mode

    # -- members ---------------------------------------------------------------

    def set_members(self, members: Iterable[ClusterMember]) -> None:
        seen: set[str] = set()
        result = []
        for member in members:
            if not member.broker_name or member.broker_name in seen:
                raise InvalidArgument(f"duplicate or empty broker name {member.broker_name!r}")
            host, sep, port = member.endpoint.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise InvalidArgument(f"endpoint {member.endpoint!r} is not HOST:PORT")
            seen.add(member.broker_name)
            result.append(member)
        self.members = tuple(sorted(result, key=lambda m: m.broker_name))

    # -- serialisation -------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "epoch": self.epoch,
            "topics": [
                {
                    "name": t.name,
                    "read": t.read_queue_nums,
                    "write": t.write_queue_nums,
                    "perm": int(t.perm),
                    "type": t.message_type.value,
                }
                for t in self.topics.values()
            ],
            "groups": [
                {
                    "name": g.name,
                    "maxReconsume": g.max_reconsume_times,
                    "fifo": g.fifo,
                    "consumeEnable": g.consume_enable,
                    "retry": {
                        "kind": g.retry_policy.kind,
                        "initialMs": g.retry_policy.initial_backoff_ms,
                        "maxMs": g.retry_policy.max_backoff_ms,
                        "multiplier": g.retry_policy.multiplier,
                        "customMs": list(g.retry_policy.customized_backoff_ms),
                    },
                }
                for g in self.groups.values()
            ],
            "modes": [
                {
                    "group": m.group,
                    "topic": m.topic,
                    "mode": m.mode.value,
                    "share": m.pop_share_queue_num,
                }
                for m in self.modes.values()
            ],
            "members": [{"name": m.broker_name, "endpoint": m.endpoint} for m in self.members],
        }

    @classmethod
    def from_json(cls, raw: Any) -> Metadata:
        """Parse a persisted config; raises ``InvalidArgument`` on anything malformed."""
        try:
            if raw.get("version") != FORMAT_VERSION:
                raise InvalidArgument(f"unsupported config version {raw.get('version')!r}")
            meta = cls(epoch=str(raw["epoch"]))
            for t in raw["topics"]:
                topic = TopicConfig(
                    name=t["name"],
                    read_queue_nums=int(t["read"]),
                    write_queue_nums=int(t["write"]),
                    perm=Permission(int(t["perm"])),
                    message_type=MessageType(t["type"]),
                )
                meta.topics[topic.name] = topic
            for g in raw["groups"]:
                r = g["retry"]
                policy = RetryPolicy(
                    kind=r["kind"],
                    initial_backoff_ms=int(r["initialMs"]),
                    max_backoff_ms=int(r["maxMs"]),
                    multiplier=float(r["multiplier"]),
                    customized_backoff_ms=tuple(int(x) for x in r["customMs"]),
                )
                group = GroupConfig(
                    name=g["name"],
                    max_reconsume_times=int(g["maxReconsume"]),
                    fifo=bool(g["fifo"]),
                    consume_enable=bool(g["consumeEnable"]),
                    retry_policy=policy,
                )
                meta.groups[group.name] = group
            for m in raw["modes"]:
                mode = ConsumeModeConfig(
                    group=m["group"],
                    topic=m["topic"],
                    mode=ConsumeMode(m["mode"]),
                    pop_share_queue_num=int(m["share"]),
                )
                meta.modes[(mode.group, mode.topic)] = mode
            meta.members = tuple(
                ClusterMember(broker_name=m["name"], endpoint=m["endpoint"]) for m in raw["members"]
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidArgument(f"malformed config file: {exc!r}") from exc
        return meta

    def with_new_epoch(self) -> Metadata:
        return replace(self, epoch=new_epoch())
