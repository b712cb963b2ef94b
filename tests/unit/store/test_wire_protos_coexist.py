"""The store proto and the RocketMQ client's protos share one descriptor pool without clashing."""

from __future__ import annotations

from google.protobuf import descriptor_pool

from popbroker.store.wire import store_pb2


def test_store_proto_is_registered_under_its_full_path_and_package() -> None:
    assert store_pb2.DESCRIPTOR.name == "popbroker/store/v1/store.proto"
    assert store_pb2.DESCRIPTOR.package == "popbroker.store.v1"
    pool = descriptor_pool.Default()
    assert set(pool.FindServiceByName("popbroker.store.v1.Store").methods_by_name) >= {
        "Info",
        "Append",
        "Read",
        "Arrivals",
        "Members",
    }


def test_rocketmq_client_modules_load_beside_ours() -> None:
    from rocketmq.grpc_protocol import admin_pb2, definition_pb2, service_pb2  # noqa: PLC0415

    assert service_pb2.DESCRIPTOR.package == "apache.rocketmq.v2"
    names = {m.DESCRIPTOR.name for m in (admin_pb2, definition_pb2, service_pb2)}
    assert store_pb2.DESCRIPTOR.name not in names
    pool = descriptor_pool.Default()
    assert pool.FindMessageTypeByName("apache.rocketmq.v2.Message") is not None
    assert pool.FindMessageTypeByName("popbroker.store.v1.StoredMessage") is not None
