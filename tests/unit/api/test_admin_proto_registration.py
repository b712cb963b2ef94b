"""The admin proto shares one descriptor pool with the store proto and the RocketMQ client's."""

from __future__ import annotations

from google.protobuf import descriptor_pool

from popfleet_api.admin.v1 import admin_pb2


def test_admin_proto_is_registered_under_its_full_path_and_package() -> None:
    assert admin_pb2.DESCRIPTOR.name == "popfleet/admin/v1/admin.proto"
    assert admin_pb2.DESCRIPTOR.package == "popfleet.admin.v1"
    service = descriptor_pool.Default().FindServiceByName("popfleet.admin.v1.BrokerAdmin")
    assert set(service.methods_by_name) == {
        "GetBrokerInfo",
        "SetMembers",
        "GetMembers",
        "PutTopic",
        "DeleteTopic",
        "ListTopics",
        "PutGroup",
        "DeleteGroup",
        "ListGroups",
        "SetConsumeMode",
        "GetConsumeMode",
        "ListConsumeModes",
        "GetOffsets",
        "GetReviveStats",
        "ScanReviveLog",
        "ScanReviveLogBatches",
        "ScanOffsets",
        "HandOver",
    }
    streaming = {m.name for m in service.methods if m.server_streaming}
    assert streaming == {"ScanReviveLog", "ScanReviveLogBatches", "ScanOffsets"}


def test_rocketmq_admin_proto_and_store_proto_load_beside_ours() -> None:
    from rocketmq.grpc_protocol import admin_pb2 as rocketmq_admin_pb2  # noqa: PLC0415

    from popbroker.store.wire import store_pb2  # noqa: PLC0415

    assert rocketmq_admin_pb2.DESCRIPTOR.name == "admin.proto"
    assert rocketmq_admin_pb2.DESCRIPTOR.package == "apache.rocketmq.v2"
    pool = descriptor_pool.Default()
    assert pool.FindMessageTypeByName("popfleet.admin.v1.Topic") is not None
    assert pool.FindMessageTypeByName("popbroker.store.v1.TopicConfig") is not None
    assert store_pb2.DESCRIPTOR.name != admin_pb2.DESCRIPTOR.name


def test_health_service_is_available() -> None:
    from grpc_health.v1 import health_pb2  # noqa: PLC0415

    assert health_pb2.DESCRIPTOR.package == "grpc.health.v1"
