"""The admin server's request validation and error table (popbroker.admin), without a server."""

from __future__ import annotations

import math
from pathlib import Path

import grpc
import pytest

from popbroker.admin import convert
from popbroker.admin.errors import AdminRefusal, status_of_store_error
from popbroker.store import api
from popbroker.store import errors as store_errors
from popfleet_api.admin.v1 import admin_pb2 as pb


def _topic(**fields: object) -> pb.Topic:
    base: dict[str, object] = {
        "name": "orders",
        "read_queue_nums": 4,
        "write_queue_nums": 4,
        "perm": pb.PERMISSION_READ_WRITE,
        "message_type": pb.MESSAGE_TYPE_NORMAL,
    }
    base.update(fields)
    return pb.Topic(**base)  # type: ignore[arg-type]


def _refusal(call: object, *args: object) -> AdminRefusal:
    with pytest.raises(AdminRefusal) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value


def test_a_valid_topic_converts() -> None:
    assert convert.topic_from_pb(_topic(perm=pb.PERMISSION_READ)) == api.TopicConfig(
        "orders", 4, 4, api.Permission.READ, api.MessageType.NORMAL
    )


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"name": ""}, "BAD_NAME"),
        ({"name": "%DLQ%x"}, "BAD_NAME"),
        ({"read_queue_nums": -1}, "BAD_COUNT"),
        ({"write_queue_nums": 1025}, "BAD_COUNT"),
        ({"read_queue_nums": 0, "write_queue_nums": 0}, "BAD_COUNT"),
        ({"perm": pb.PERMISSION_UNSPECIFIED}, "BAD_ENUM"),
        ({"message_type": pb.MessageType.ValueType(42)}, "BAD_ENUM"),
    ],
)
def test_bad_topics_are_refused(fields: dict[str, object], reason: str) -> None:
    refusal = _refusal(convert.topic_from_pb, _topic(**fields))
    assert (refusal.code, refusal.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason)


def test_shrinking_names_both_current_counts() -> None:
    current = api.TopicConfig("orders", 8, 6)
    convert.check_no_shrink(current, api.TopicConfig("orders", 8, 6))
    convert.check_no_shrink(current, api.TopicConfig("orders", 16, 6))
    refusal = _refusal(convert.check_no_shrink, current, api.TopicConfig("orders", 8, 5))
    assert refusal.code == grpc.StatusCode.FAILED_PRECONDITION
    assert refusal.reason == "QUEUE_SHRINK"
    assert "has 8 read and 6 write queues" in refusal.message
    assert "8 read and 5 write" in refusal.message


def test_groups_and_retry_policies() -> None:
    plain = convert.group_from_pb(pb.Group(name="g", max_reconsume_times=3, consume_enable=True))
    assert plain == api.GroupConfig("g", 3, False, True, api.RetryPolicy())
    custom = pb.RetryPolicy(kind=pb.RETRY_KIND_CUSTOMIZED, customized_backoff_ms=[10, 20])
    group = convert.group_from_pb(pb.Group(name="g", retry_policy=custom))
    assert group.retry_policy.kind == "customized"
    assert group.retry_policy.customized_backoff_ms == (10, 20)
    assert convert.group_from_pb(convert.group_to_pb(group)) == group


@pytest.mark.parametrize(
    "policy",
    [
        pb.RetryPolicy(),
        pb.RetryPolicy(kind=pb.RETRY_KIND_EXPONENTIAL, initial_backoff_ms=1, max_backoff_ms=2),
        pb.RetryPolicy(kind=pb.RETRY_KIND_EXPONENTIAL, max_backoff_ms=2, multiplier=math.inf),
        pb.RetryPolicy(kind=pb.RETRY_KIND_EXPONENTIAL, max_backoff_ms=10**12, multiplier=2),
        pb.RetryPolicy(kind=pb.RETRY_KIND_CUSTOMIZED),
        pb.RetryPolicy(kind=pb.RETRY_KIND_CUSTOMIZED, customized_backoff_ms=[1] * 65),
    ],
)
def test_bad_retry_policies_are_refused(policy: pb.RetryPolicy) -> None:
    refusal = _refusal(convert.group_from_pb, pb.Group(name="g", retry_policy=policy))
    assert refusal.code == grpc.StatusCode.INVALID_ARGUMENT


def test_consume_modes() -> None:
    request = pb.SetConsumeModeRequest(
        group="g", topic="t", mode=pb.CONSUME_MODE_POP, pop_share_queue_num=2
    )
    assert convert.consume_mode_from_pb(request) == api.ConsumeModeConfig(
        "g", "t", api.ConsumeMode.POP, 2
    )
    for bad in (
        pb.SetConsumeModeRequest(group="g", topic="t"),
        pb.SetConsumeModeRequest(
            group="g", topic="t", mode=pb.CONSUME_MODE_POP, pop_share_queue_num=-1
        ),
        pb.SetConsumeModeRequest(group="", topic="t", mode=pb.CONSUME_MODE_POP),
    ):
        assert _refusal(convert.consume_mode_from_pb, bad).code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "members",
    [
        [pb.Member(broker_name="a", endpoint="h:1"), pb.Member(broker_name="a", endpoint="h:2")],
        [pb.Member(broker_name="", endpoint="h:1")],
        [pb.Member(broker_name="a", endpoint="h")],
        [pb.Member(broker_name="a", endpoint="h:65536")],
        [pb.Member(broker_name="a", endpoint="h :1")],
    ],
)
def test_bad_members_are_refused(members: list[pb.Member]) -> None:
    assert _refusal(convert.members_from_pb, members).reason == "BAD_MEMBER"


def test_members_convert() -> None:
    members = [pb.Member(broker_name="pod-0.popfleet", endpoint="[::1]:8081")]
    assert convert.members_from_pb(members) == [api.ClusterMember("pod-0.popfleet", "[::1]:8081")]


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (store_errors.InvalidName("x"), grpc.StatusCode.INVALID_ARGUMENT, "BAD_NAME"),
        (store_errors.QueueShrinkRefused("x"), grpc.StatusCode.FAILED_PRECONDITION, "QUEUE_SHRINK"),
        (store_errors.EmptyBody("x"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        (store_errors.UnknownTopic("x"), grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOPIC"),
        (store_errors.StoreFull("x"), grpc.StatusCode.RESOURCE_EXHAUSTED, "STORE_FULL"),
        (store_errors.StoreClosed("x"), grpc.StatusCode.UNAVAILABLE, "STORE_CLOSED"),
        (store_errors.CorruptStore("x"), grpc.StatusCode.DATA_LOSS, "CORRUPT_STORE"),
        (store_errors.StoreError("x"), grpc.StatusCode.INTERNAL, "STORE_ERROR"),
    ],
)
def test_store_errors_map_to_statuses(
    error: store_errors.StoreError, code: grpc.StatusCode, reason: str
) -> None:
    assert status_of_store_error(error) == (code, reason)


def test_admin_token_from_a_file_or_the_environment(tmp_path: Path) -> None:
    from popbroker.admin.server import load_token  # noqa: PLC0415

    secret = tmp_path / "token"
    secret.write_text("abc123\n")
    assert load_token(secret, environ={"POPFLEET_ADMIN_TOKEN": "env"}) == "abc123"
    assert load_token(None, environ={"POPFLEET_ADMIN_TOKEN": "env"}) == "env"
    assert load_token(None, environ={}) is None
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        load_token(tmp_path / "empty", environ={})
    with pytest.raises(FileNotFoundError):
        load_token(tmp_path / "missing", environ={})
