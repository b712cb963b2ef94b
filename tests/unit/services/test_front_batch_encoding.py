"""The ``ReceiveBatch`` popack answers popfront with: one repeated ``bytes`` field.

Checked against protobuf itself (a message with that one field, built at run
time), so the hand-written encoder is the wire format the Go side parses with
``protowire`` (whose reading of damaged input broker_image/front/proxy_test.go checks).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given
from hypothesis import strategies as st

from popbroker.grpc.front import encode_batch


def _reference_class() -> Any:
    file = descriptor_pb2.FileDescriptorProto(
        name="front_batch_reference.proto", package="popfleet.front.v1", syntax="proto3"
    )
    message = file.message_type.add(name="ReceiveBatch")
    message.field.add(
        name="responses",
        number=1,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("popfleet.front.v1.ReceiveBatch")
    )


ReceiveBatch = _reference_class()
items = st.lists(st.binary(max_size=300), max_size=40)


@given(items)
def test_encoding_is_protobufs(responses: list[bytes]) -> None:
    encoded = encode_batch(responses)
    assert encoded == ReceiveBatch(responses=responses).SerializeToString()
    assert list(ReceiveBatch.FromString(encoded).responses) == responses


def test_long_responses_take_multi_byte_lengths() -> None:
    big = [b"x" * 200_000, b"", b"y" * 128]
    assert list(ReceiveBatch.FromString(encode_batch(big)).responses) == big
    assert encode_batch(big) == ReceiveBatch(responses=big).SerializeToString()
