"""``sync_topic``/``sync_group`` read one object by name, never every object on a broker.

A broker holding many other topics and groups answers the same few calls per CR:
converged, a Topic costs ``info`` + one by-name topic read per broker; a
ConsumerGroup with T topics ``info`` + one by-name group read + T mode reads (2 + T).
A write adds the write and one read back. The brokers here record what each list
call asked for, so a call listing everything would show as ``None``.
"""

from __future__ import annotations

from collections.abc import Collection

from popfleet_api import models
from popfleet_api.testing import InMemoryBrokerAdmin
from popfleet_operator.clients import fanout
from popfleet_operator.model import specs

OTHERS = 300


class RecordingBroker(InMemoryBrokerAdmin):
    """The in-memory broker, noting the ``names`` of every topics/groups call."""

    def __init__(self, broker_name: str) -> None:
        super().__init__(f"memory:{broker_name}", broker_name=broker_name)
        self.asked: list[tuple[str, list[str] | None]] = []

    async def topics(
        self, *, include_system: bool = False, names: Collection[str] | None = None
    ) -> list[models.Topic]:
        self.asked.append(("topics", None if names is None else sorted(names)))
        return await super().topics(include_system=include_system, names=names)

    async def groups(self, *, names: Collection[str] | None = None) -> list[models.Group]:
        self.asked.append(("groups", None if names is None else sorted(names)))
        return await super().groups(names=names)


async def _crowded() -> dict[str, RecordingBroker]:
    brokers = {name: RecordingBroker(name) for name in ("demo-0", "demo-1")}
    for admin in brokers.values():
        for index in range(OTHERS):
            await admin.put_topic(models.Topic(f"other-{index}", 4, 4))
            await admin.put_group(models.Group(f"other-{index}"))
        admin.calls.clear()
    return brokers


def _topic() -> specs.TopicSpec:
    return specs.parse_topic("orders", {"clusterRef": {"name": "demo"}, "queues": 8})


def _group() -> specs.GroupSpec:
    return specs.parse_group(
        "billing",
        {
            "clusterRef": {"name": "demo"},
            "topics": [{"name": "orders"}, {"name": "refunds"}],
            "consumeMode": "POP",
            "popShareQueueNum": 1,
        },
    )


async def test_a_topic_costs_two_calls_per_broker_and_four_with_a_write() -> None:
    brokers = await _crowded()
    first = await fanout.sync_topic(brokers, _topic())
    assert all(o.synced and o.wrote for o in first)
    for admin in brokers.values():
        assert admin.calls == ["info", "topics", "put_topic", "topics"]
        admin.calls.clear()
    again = await fanout.sync_topic(brokers, _topic())
    assert all(o.synced and not o.wrote for o in again)
    for admin in brokers.values():
        assert admin.calls == ["info", "topics"]
        assert admin.asked == [("topics", ["orders"])] * 3


async def test_a_group_costs_two_plus_one_call_per_topic_when_converged() -> None:
    brokers = await _crowded()
    for admin in brokers.values():
        for name in ("orders", "refunds"):
            await admin.put_topic(models.Topic(name, 4, 4))
        admin.calls.clear()
    first = await fanout.sync_group(brokers, _group())
    assert all(o.synced and o.wrote and o.mode == "POP" for o in first)
    again = await fanout.sync_group(brokers, _group())
    assert all(o.synced and not o.wrote for o in again)
    for admin in brokers.values():
        per_round = admin.calls[-4:]
        assert per_round == ["info", "groups", "consume_mode", "consume_mode"]
        assert admin.calls[:3] == ["info", "groups", "put_group"]
        assert all(names == ["billing"] for kind, names in admin.asked if kind == "groups")
        assert len(admin.asked) == 3  # before and after the write, then the converged round
