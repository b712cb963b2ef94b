"""popbroker.grpc: the client-facing ``apache.rocketmq.v2.MessagingService`` endpoint.

The protocol modules are the ones the official ``rocketmq-python-client``
package ships (``rocketmq.grpc_protocol``), reused rather than regenerated:
their descriptors are registered under the file names ``definition.proto`` /
``service.proto``, and our own store proto under
``popbroker/store/v1/store.proto``, so a broker and an official client can
share one process without a descriptor-pool clash.

Modules: :mod:`~popbroker.grpc.protocol` (the imports, typed loosely),
:mod:`~popbroker.grpc.statuses` (the one error → ``Code`` table),
:mod:`~popbroker.grpc.convert` (wire ↔ service values),
:mod:`~popbroker.grpc.servicer` (the RPCs), :mod:`~popbroker.grpc.server`
(serving the endpoint), :mod:`~popbroker.grpc.edge` (auth, TLS, call counting
around it). The roles that serve it are composed in :mod:`popbroker.roles`.
"""
