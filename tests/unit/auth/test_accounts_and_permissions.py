"""The credentials file and the permission each RPC needs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2 as definition
from rocketmq.grpc_protocol import service_pb2 as service

from popbroker.auth import accounts, resources
from popbroker.auth.errors import BadCredentialsFile, Forbidden

DOC: dict[str, Any] = {
    "accounts": [
        {
            "accessKey": "app",
            "secretKey": "s3cret",
            "publish": ["orders", "audit-*"],
            "subscribe": ["orders"],
            "groups": ["billing"],
        },
        {"accessKey": "reader", "secretKey": "r", "subscribe": ["orders"]},
    ]
}


def app() -> accounts.Account:
    return accounts.parse(DOC).by_key["app"]


def test_yaml_and_json_files_load_the_same(tmp_path: Path) -> None:
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(
        "maxClockSkewSeconds: 900\naccounts:\n"
        "  - accessKey: app\n    secretKey: s3cret\n    publish: [orders]\n"
    )
    json_file = tmp_path / "c.json"
    json_file.write_text(json.dumps({**DOC, "maxClockSkewSeconds": 900}))
    loaded_yaml, loaded_json = accounts.load(yaml_file), accounts.load(json_file)
    assert loaded_yaml.max_clock_skew_s == loaded_json.max_clock_skew_s == 900
    assert loaded_yaml.secrets == {"app": "s3cret"}
    assert set(loaded_json.secrets) == {"app", "reader"}


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ([], "a mapping with 'accounts'"),
        ({"accounts": []}, "non-empty list"),
        ({"acounts": [{}]}, "unknown fields"),
        ({"accounts": [{"accessKey": "a"}]}, "secretKey"),
        ({"accounts": [{"accessKey": "", "secretKey": "s"}]}, "accessKey"),
        ({"accounts": [{"accessKey": "a b", "secretKey": "s"}]}, "no spaces"),
        ({"accounts": [{"accessKey": "a", "secretKey": "s", "admin": True}]}, "unknown fields"),
        ({"accounts": [{"accessKey": "a", "secretKey": "s", "publish": "orders"}]}, "a list"),
        ({"accounts": [{"accessKey": "a", "secretKey": "s", "groups": [""]}]}, "a list"),
        ({"accounts": [{"accessKey": "a", "secretKey": "s"}] * 2}, "given twice"),
        ({"accounts": [{"accessKey": "a", "secretKey": "s"}], "maxClockSkewSeconds": -1},
         "non-negative"),
    ],
)  # fmt: skip
def test_bad_documents_are_refused_clearly(document: object, reason: str) -> None:
    with pytest.raises(BadCredentialsFile, match=reason):
        accounts.parse(document)


def test_unreadable_and_unparsable_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(BadCredentialsFile, match=r"missing\.yaml"):
        accounts.load(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("accounts: [\n")
    with pytest.raises(BadCredentialsFile, match=r"broken\.yaml"):
        accounts.load(broken)


def test_patterns_match_exact_prefix_and_everything() -> None:
    account = app()
    account.check_publish("orders")
    account.check_publish("audit-2026")
    with pytest.raises(Forbidden, match="may not publish to topic ordersx"):
        account.check_publish("ordersx")
    everything = accounts.parse(
        {"accounts": [{"accessKey": "o", "secretKey": "s", "groups": ["*"]}]}
    ).by_key["o"]
    everything.check_group("anything")


def test_retry_and_dlq_topics_need_the_group() -> None:
    account = app()
    account.check_subscribe("%RETRY%billing+orders")
    account.check_subscribe("%DLQ%billing")
    with pytest.raises(Forbidden, match="group other"):
        account.check_subscribe("%RETRY%other+orders")
    with pytest.raises(Forbidden, match="group other"):
        account.check_subscribe("%DLQ%other")


def _queue(topic: str) -> Any:
    return definition.MessageQueue(topic=definition.Resource(name=topic), id=0)


def test_each_rpc_checks_its_resources() -> None:
    account, reader = app(), accounts.parse(DOC).by_key["reader"]
    orders, group = definition.Resource(name="orders"), definition.Resource(name="billing")
    send = service.SendMessageRequest(messages=[definition.Message(topic=orders)])
    receive = service.ReceiveMessageRequest(group=group, message_queue=_queue("orders"))
    ack = service.AckMessageRequest(group=group, topic=orders)
    route = service.QueryRouteRequest(topic=orders)
    for rpc, request in [("SendMessage", send), ("ReceiveMessage", receive),
                         ("AckMessage", ack), ("QueryRoute", route)]:  # fmt: skip
        resources.authorize(account, rpc, request)
    resources.authorize(reader, "QueryRoute", route)  # subscribing needs a route too
    with pytest.raises(Forbidden, match="publish"):
        resources.authorize(reader, "SendMessage", send)
    with pytest.raises(Forbidden, match="group billing"):
        resources.authorize(reader, "ReceiveMessage", receive)
    with pytest.raises(Forbidden, match="group billing"):
        resources.authorize(reader, "AckMessage", ack)
    with pytest.raises(Forbidden, match="neither"):
        resources.authorize(reader, "QueryRoute", service.QueryRouteRequest(topic=group))


def test_heartbeat_checks_a_named_group_only() -> None:
    reader = accounts.parse(DOC).by_key["reader"]
    resources.authorize(reader, "Heartbeat", service.HeartbeatRequest())
    with pytest.raises(Forbidden):
        resources.authorize(
            reader,
            "Heartbeat",
            service.HeartbeatRequest(group=definition.Resource(name="billing")),
        )


def test_a_send_mixing_topics_needs_every_one() -> None:
    send = service.SendMessageRequest(
        messages=[
            definition.Message(topic=definition.Resource(name="orders")),
            definition.Message(topic=definition.Resource(name="payments")),
        ]
    )
    with pytest.raises(Forbidden, match="payments"):
        resources.authorize(app(), "SendMessage", send)


def test_an_rpc_the_table_does_not_know_is_refused() -> None:
    with pytest.raises(Forbidden, match="not open"):
        resources.authorize(app(), "SomeFutureRpc", service.QueryRouteRequest())


def test_every_v2_rpc_has_a_rule() -> None:
    methods = service.DESCRIPTOR.services_by_name["MessagingService"].methods
    assert {m.name for m in methods} <= set(resources.CHECKS)


def test_telemetry_settings_need_what_they_announce() -> None:
    account, reader = app(), accounts.parse(DOC).by_key["reader"]
    orders = definition.Resource(name="orders")
    consumer = definition.Settings(
        subscription=definition.Subscription(
            group=definition.Resource(name="billing"),
            subscriptions=[definition.SubscriptionEntry(topic=orders)],
        )
    )
    producer = definition.Settings(publishing=definition.Publishing(topics=[orders]))
    resources.authorize_settings(account, consumer)
    resources.authorize_settings(account, producer)
    with pytest.raises(Forbidden, match="group billing"):
        resources.authorize_settings(reader, consumer)  # would join billing's assignment
    with pytest.raises(Forbidden, match="publish"):
        resources.authorize_settings(reader, producer)
    resources.authorize_settings(reader, definition.Settings())  # neither: nothing to check
