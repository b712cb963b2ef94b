"""popbroker.services: thin async services wiring the pure POP core to a ``StoreApi``.

Layering (import-linter): ``popbroker.grpc`` → ``popbroker.services`` →
(``popbroker.pop`` | ``popbroker.store``). Nothing here speaks protobuf; the
gRPC endpoint converts requests into the plain values these modules take and
maps the errors they raise with one table (``popbroker.grpc.statuses``).

Modules:

  * :mod:`~popbroker.services.settings` — ``PopackSettings``, the clock type.
  * :mod:`~popbroker.services.errors` — service errors (``retriable`` flags).
  * :mod:`~popbroker.services.configcache` — topics/groups/members with a short TTL.
  * :mod:`~popbroker.services.messages` — message values and their store properties.
  * :mod:`~popbroker.services.revivelog` — the store messages that append CK/ACK/delay
    records to the revive log.
  * :mod:`~popbroker.services.popstate` — the popack role's in-memory state.
  * :mod:`~popbroker.services.popping` — one pop attempt over a request's queues;
    :mod:`~popbroker.services.popattempt` (its values and shared reads),
    :mod:`~popbroker.services.fifopopping` (FIFO queues).
  * :mod:`~popbroker.services.receiving` — a receive: validation, pop, long polling.
  * :mod:`~popbroker.services.checkpointing` — CK flush and offset-commit loop.
  * :mod:`~popbroker.services.acking` — ack, change invisible time, forward to DLQ.
  * :mod:`~popbroker.services.longpolling` — parked receives, woken by arrivals.
  * :mod:`~popbroker.services.sending` — validation, queue choice, idempotent sends.
  * :mod:`~popbroker.services.pulling` — offset-based pulls and offsets (lite pull consumers).
  * :mod:`~popbroker.services.delaying` — DELAY messages held in the revive log.
  * :mod:`~popbroker.services.reviving` — the revive role's loop;
    :mod:`~popbroker.services.revivequeue` (one revive queue's worker),
    :mod:`~popbroker.services.redelivery` (copying due checkpoints' messages).
  * :mod:`~popbroker.services.clients` — live clients per group.
  * :mod:`~popbroker.services.routing` — routes and assignments.
  * :mod:`~popbroker.services.popack` — the popack role's services wired together.
"""
