"""The store API between processes: gRPC on a Unix socket (DESIGN §3).

``client.RemoteStore`` implements ``popbroker.store.api.StoreApi`` for the
``popack`` and ``revive`` roles; ``server.StoreServicer`` serves any ``StoreApi``
(the ``store`` role serves its ``LocalStore``). ``convert`` translates between
protobuf messages and the api dataclasses, ``errormap`` between ``StoreError``
subclasses and gRPC status codes. ``store_pb2*`` are generated from
``broker_image/proto/popbroker/store/v1/store.proto`` by ``make proto``; never
edit them (``make drift`` fails when they are stale). Why gRPC and not a
hand-rolled protocol or shared mmap: ``docs/design/2026-11-21-store-wire.md``.
"""
