"""Bad input on every admin RPC: a clear status code, a stable reason, and nothing changed.

Each case runs against a broker seeded with one topic, one group and one mode;
the store's whole declared state (topics, groups, modes, members, offsets,
config epoch) is compared before and after. Cases the typed client cannot
express (UNSPECIFIED enums, missing messages) go through the generated stub.
GetBrokerInfo, GetMembers, ListTopics, ListGroups and GetReviveStats take no
input that could be bad; the scans' bad input is in test_scans_paged_and_resumable.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest

from popfleet_api import errors
from popfleet_api.admin.v1 import admin_pb2 as pb
from popfleet_api.admin.v1 import admin_pb2_grpc
from popfleet_api.client import BrokerAdmin
from popfleet_api.models import (
    ConsumeMode,
    Group,
    Member,
    RetryKind,
    RetryPolicy,
    Topic,
)
from tests.integration.admin.conftest import CLUSTER, Broker

Typed = Callable[[BrokerAdmin], Awaitable[object]]
Raw = Callable[[admin_pb2_grpc.BrokerAdminStub], Awaitable[object]]


@dataclass(frozen=True)
class Case:
    name: str
    call: Typed | None = None
    raw: Raw | None = None
    code: str = "INVALID_ARGUMENT"
    reason: str = ""


def _policy(**fields: object) -> Group:
    return Group("billing", retry_policy=RetryPolicy(**fields))  # type: ignore[arg-type]


CASES = [
    # SetMembers
    Case("members-duplicate", lambda a: a.set_members([Member("b", "h:1"), Member("b", "h:2")])),
    Case("members-empty-name", lambda a: a.set_members([Member("", "h:1")])),
    Case("members-bad-name", lambda a: a.set_members([Member("a b", "h:1")])),
    Case("members-no-port", lambda a: a.set_members([Member("b", "host")]), reason="BAD_MEMBER"),
    Case("members-port-zero", lambda a: a.set_members([Member("b", "host:0")])),
    Case("members-port-high", lambda a: a.set_members([Member("b", "host:70000")])),
    Case("members-no-host", lambda a: a.set_members([Member("b", ":80")])),
    # PutTopic
    Case("topic-empty-name", lambda a: a.put_topic(Topic("", 1, 1)), reason="BAD_NAME"),
    Case("topic-bad-name", lambda a: a.put_topic(Topic("or ders", 1, 1)), reason="BAD_NAME"),
    Case("topic-long-name", lambda a: a.put_topic(Topic("t" * 128, 1, 1)), reason="BAD_NAME"),
    Case("topic-retry-name", lambda a: a.put_topic(Topic("%RETRY%g+t", 1, 1))),
    Case("topic-dlq-name", lambda a: a.put_topic(Topic("%DLQ%g", 1, 1))),
    Case("topic-system-name", lambda a: a.put_topic(Topic(f"rmq_sys_REVIVE_LOG_{CLUSTER}", 9, 9))),
    Case("topic-negative-read", lambda a: a.put_topic(Topic("new", -1, 1)), reason="BAD_COUNT"),
    Case("topic-negative-write", lambda a: a.put_topic(Topic("new", 1, -4))),
    Case("topic-no-queues", lambda a: a.put_topic(Topic("new", 0, 0)), reason="BAD_COUNT"),
    Case("topic-too-many", lambda a: a.put_topic(Topic("new", 1025, 1)), reason="BAD_COUNT"),
    Case("topic-int32-overflow", lambda a: a.put_topic(Topic("new", 2**40, 1))),
    Case(
        "topic-shrink",
        lambda a: a.put_topic(Topic("orders", 2, 4)),
        code="FAILED_PRECONDITION",
        reason="QUEUE_SHRINK",
    ),
    Case("topic-missing", raw=lambda s: s.PutTopic(pb.PutTopicRequest())),
    Case(
        "topic-perm-unspecified",
        raw=lambda s: s.PutTopic(
            pb.PutTopicRequest(
                topic=pb.Topic(
                    name="new",
                    read_queue_nums=1,
                    write_queue_nums=1,
                    message_type=pb.MESSAGE_TYPE_NORMAL,
                )
            )
        ),
        reason="BAD_ENUM",
    ),
    Case(
        "topic-type-unspecified",
        raw=lambda s: s.PutTopic(
            pb.PutTopicRequest(
                topic=pb.Topic(
                    name="new", read_queue_nums=1, write_queue_nums=1, perm=pb.PERMISSION_READ
                )
            )
        ),
        reason="BAD_ENUM",
    ),
    # DeleteTopic
    Case("delete-unknown-topic", lambda a: a.delete_topic("nope"), code="NOT_FOUND"),
    Case("delete-empty-topic", lambda a: a.delete_topic(""), code="NOT_FOUND"),
    Case(
        "delete-system-topic",
        lambda a: a.delete_topic(f"rmq_sys_REVIVE_LOG_{CLUSTER}"),
        code="FAILED_PRECONDITION",
        reason="SYSTEM_TOPIC",
    ),
    # PutGroup
    Case("group-bad-name", lambda a: a.put_group(Group("bill ing")), reason="BAD_NAME"),
    Case("group-negative-reconsume", lambda a: a.put_group(Group("g", max_reconsume_times=-1))),
    Case("group-huge-reconsume", lambda a: a.put_group(Group("g", max_reconsume_times=1001))),
    Case("policy-multiplier-low", lambda a: a.put_group(_policy(multiplier=0.5))),
    Case("policy-multiplier-nan", lambda a: a.put_group(_policy(multiplier=math.nan))),
    Case(
        "policy-initial-above-max",
        lambda a: a.put_group(_policy(initial_backoff_ms=9_000, max_backoff_ms=1_000)),
        reason="BAD_RETRY_POLICY",
    ),
    Case("policy-negative-backoff", lambda a: a.put_group(_policy(initial_backoff_ms=-1))),
    Case("policy-custom-empty", lambda a: a.put_group(_policy(kind=RetryKind.CUSTOMIZED))),
    Case(
        "policy-custom-too-long",
        lambda a: a.put_group(_policy(kind=RetryKind.CUSTOMIZED, customized_backoff_ms=(1,) * 65)),
    ),
    Case(
        "policy-custom-negative",
        lambda a: a.put_group(_policy(kind=RetryKind.CUSTOMIZED, customized_backoff_ms=(-5,))),
    ),
    Case("group-missing", raw=lambda s: s.PutGroup(pb.PutGroupRequest())),
    Case(
        "policy-kind-unspecified",
        raw=lambda s: s.PutGroup(
            pb.PutGroupRequest(group=pb.Group(name="g", retry_policy=pb.RetryPolicy()))
        ),
        reason="BAD_ENUM",
    ),
    # DeleteGroup
    Case("delete-unknown-group", lambda a: a.delete_group("nobody"), code="NOT_FOUND"),
    # SetConsumeMode
    Case(
        "mode-unknown-group",
        lambda a: a.set_consume_mode("nobody", "orders", mode=ConsumeMode.POP),
        code="NOT_FOUND",
        reason="UNKNOWN_GROUP",
    ),
    Case(
        "mode-unknown-topic",
        lambda a: a.set_consume_mode("billing", "nope", mode=ConsumeMode.POP),
        code="NOT_FOUND",
        reason="UNKNOWN_TOPIC",
    ),
    Case(
        "mode-negative-share",
        lambda a: a.set_consume_mode(
            "billing", "orders", mode=ConsumeMode.POP, pop_share_queue_num=-1
        ),
        reason="BAD_COUNT",
    ),
    Case(
        "mode-bad-name",
        lambda a: a.set_consume_mode("bill ing", "orders", mode=ConsumeMode.POP),
        reason="BAD_NAME",
    ),
    Case(
        "mode-system-topic",
        lambda a: a.set_consume_mode(
            "billing", f"rmq_sys_REVIVE_LOG_{CLUSTER}", mode=ConsumeMode.POP
        ),
    ),
    Case(
        "mode-unspecified",
        raw=lambda s: s.SetConsumeMode(pb.SetConsumeModeRequest(group="billing", topic="orders")),
        reason="BAD_ENUM",
    ),
    Case(
        "mode-bogus-number",
        raw=lambda s: s.SetConsumeMode(
            pb.SetConsumeModeRequest(
                group="billing", topic="orders", mode=pb.ConsumeMode.ValueType(7)
            )
        ),
        reason="BAD_ENUM",
    ),
    # GetConsumeMode / ListConsumeModes
    Case("get-mode-unknown-group", lambda a: a.consume_mode("nobody", "orders"), code="NOT_FOUND"),
    Case("get-mode-unknown-topic", lambda a: a.consume_mode("billing", "nope"), code="NOT_FOUND"),
    Case("get-mode-bad-name", lambda a: a.consume_mode("billing", "no pe"), reason="BAD_NAME"),
    Case("list-modes-unknown-group", lambda a: a.consume_modes("nobody"), code="NOT_FOUND"),
    # GetOffsets
    Case("offsets-unknown-group", lambda a: a.offsets("nobody"), code="NOT_FOUND"),
    Case("offsets-unknown-topic", lambda a: a.offsets("billing", ["nope"]), code="NOT_FOUND"),
    Case("offsets-bad-group", lambda a: a.offsets(""), reason="BAD_NAME"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_bad_input_is_refused_and_changes_nothing(
    case: Case,
    broker: Broker,
    admin: BrokerAdmin,
    raw_stub: admin_pb2_grpc.BrokerAdminStub,
) -> None:
    await admin.put_topic(Topic("orders", 4, 4))
    await admin.put_group(Group("billing"))
    await admin.set_consume_mode("billing", "orders", mode=ConsumeMode.POP, pop_share_queue_num=1)
    await admin.set_members([Member("broker-a", "127.0.0.1:8081")])
    before = await broker.snapshot()

    if case.call is not None:
        with pytest.raises(errors.AdminError) as caught:
            await case.call(admin)
        code, reason = caught.value.code, caught.value.reason
        assert not caught.value.retriable
    else:
        assert case.raw is not None
        with pytest.raises(grpc.aio.AioRpcError) as raw_caught:
            await case.raw(raw_stub)
        code = raw_caught.value.code().name
        reason = dict(raw_caught.value.trailing_metadata() or ()).get("popfleet-admin-reason", "")

    assert code == case.code
    if case.reason:
        assert reason == case.reason
    assert reason  # every refusal carries a stable reason
    assert await broker.snapshot() == before
