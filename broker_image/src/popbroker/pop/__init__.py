"""popbroker.pop: the pure POP core (no I/O, no asyncio, no threads, no store).

Every time-dependent function takes ``now_ms``; every piece of state is an
explicit object the services layer owns and serialises. Modules:

  * :mod:`~popbroker.pop.errors` — the error hierarchy (``retriable`` flags).
  * :mod:`~popbroker.pop.receipts` — receipt handles (encode, strict decode).
  * :mod:`~popbroker.pop.checkpoints` — checkpoints, match keys, bitmaps.
  * :mod:`~popbroker.pop.records` — ``ck``/``ack``/``bAck`` revive-log bodies.
  * :mod:`~popbroker.pop.revivelog` — the revive-log envelope (tags, delay
    properties) and its one decoder.
  * :mod:`~popbroker.pop.checkpointbuffer` — in-memory CKs, ack merge, commit order.
  * :mod:`~popbroker.pop.popping` — request validation, visit order, pop offsets.
  * :mod:`~popbroker.pop.queuelocks` — timed non-blocking queue locks.
  * :mod:`~popbroker.pop.assignment` — PULL and POP (``allocate4Pop``) assignment.
  * :mod:`~popbroker.pop.reviving` — the revive ledger and read verification.
  * :mod:`~popbroker.pop.retrytopics` — retry/DLQ names and the DLQ decision.
  * :mod:`~popbroker.pop.orderinfo` — FIFO batches, blocking and acks.
  * :mod:`~popbroker.pop.invisibility` — change of invisible time.

Import-linter forbids this package from importing the store, the services,
grpc, asyncio and socket.
"""
