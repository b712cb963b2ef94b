"""The v2 protocol modules shipped by the official Python client, in one place.

``rocketmq.grpc_protocol`` has no type stubs, so everything imported from it
is ``Any`` to mypy; the rest of the package imports these names from here and
never from ``rocketmq`` directly, so a change of the client package touches
one file.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as definition
from rocketmq.grpc_protocol import service_pb2 as service
from rocketmq.grpc_protocol import service_pb2_grpc as service_grpc

Code = definition.Code
MessagingServiceServicer = service_grpc.MessagingServiceServicer
add_servicer_to_server = service_grpc.add_MessagingServiceServicer_to_server
MessagingServiceStub = service_grpc.MessagingServiceStub

__all__ = [
    "Code",
    "MessagingServiceServicer",
    "MessagingServiceStub",
    "add_servicer_to_server",
    "definition",
    "service",
    "service_grpc",
]
