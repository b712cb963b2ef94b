"""Who leads a broker set: the pure decisions around a Kubernetes Lease (issue 18).

The Lease (``coordination.k8s.io/v1``) is a compare-and-swap register: every update carries
the ``resourceVersion`` it read, and the API server refuses a stale one with 409. It is not
a clock: a candidate never trusts the holder's ``renewTime``, only how long *it* has seen
the record unchanged (client-go's rule, anchors §4.3). The term is our own counter on the
same object, moved N -> N+1 only by a successful compare-and-swap, so it is strictly
ordered (``resourceVersion`` is not, anchors §4.2, §4.5) and it is what the data path
fences on.

Per candidate, every ``retry_ms``:

1. read the record; if it differs from the last one read, note the local time
   (:class:`Observer`);
2. :func:`decide`: the holder renews; anyone else takes over only when the record has been
   unchanged for ``lease_ms`` by its own clock and it is eligible (a live member of the
   in-sync set the Lease records, ``Record.may_lead``); otherwise it waits. A released
   Lease (no holder) is taken at once, except one *handed over*: its former holder named a
   successor (``Record.successor``), and only that replica takes it at once; the others
   wait the lease time, in case the successor is gone too;
3. write the decision with the ``resourceVersion`` read; a 409 means someone else moved.

The holder accepts writes only while its last successful renewal is younger than
``renew_deadline_ms`` by its own clock (:func:`may_serve`). With ``lease_ms`` larger than
``renew_deadline_ms`` by more than the clocks' rate difference can eat, a deposed holder has
stopped serving before anyone can take over (:func:`check_timing`); a frozen process that
wakes up late is still fenced by the term on the data path, not by this timing.
"""

from __future__ import annotations

from dataclasses import dataclass


class LeaseTimingError(ValueError):
    """Timings that cannot keep two holders apart."""


def check_timing(*, lease_ms: int, renew_deadline_ms: int, retry_ms: int) -> None:
    """client-go's rule: lease > renew deadline > 1.2 x retry period."""
    if not lease_ms > renew_deadline_ms:
        raise LeaseTimingError(
            f"lease {lease_ms} ms must exceed renew deadline {renew_deadline_ms}"
        )
    if not renew_deadline_ms > 1.2 * retry_ms:
        raise LeaseTimingError(
            f"renew deadline {renew_deadline_ms} ms must exceed 1.2 x retry {retry_ms} ms"
        )


@dataclass(frozen=True, slots=True)
class Record:
    """The Lease as read: holder (None when released), our term, its resourceVersion, the
    in-sync set the holder last recorded there (empty before any), and the successor a
    holder named when it handed the Lease over (None: none named)."""

    holder: str | None
    term: int
    version: str
    in_sync: frozenset[str] = frozenset()
    successor: str | None = None

    def may_lead(self, me: str) -> bool:
        """Only a member of the recorded in-sync set may lead the next term (rule 4 of
        ``popbroker.replication.rules``); before any set is recorded, anyone may."""
        return not self.in_sync or me in self.in_sync


@dataclass(frozen=True, slots=True)
class Renew:
    term: int


@dataclass(frozen=True, slots=True)
class TakeOver:
    term: int  # the record's term + 1


@dataclass(frozen=True, slots=True)
class Wait:
    reason: str


Decision = Renew | TakeOver | Wait


class Observer:
    """Local time at which a candidate last saw the record change (never the holder's)."""

    def __init__(self) -> None:
        self._seen: Record | None = None
        self._since_ms = 0

    def observe(self, record: Record, now_ms: int) -> int:
        """Note ``record`` read at ``now_ms``; how long it has been unchanged, in ms."""
        if record != self._seen:
            self._seen, self._since_ms = record, now_ms
        return now_ms - self._since_ms


def decide(
    me: str, record: Record, *, unchanged_ms: int, lease_ms: int, eligible: bool
) -> Decision:
    """What ``me`` writes next (step 2 of the module docstring)."""
    if record.holder == me:
        return Renew(record.term)
    if not eligible:
        return Wait("not a live member of the in-sync set")
    if record.holder is None and record.successor in (None, me):
        return TakeOver(record.term + 1)
    if unchanged_ms >= lease_ms:
        return TakeOver(record.term + 1)
    if record.holder is None:
        return Wait(f"term {record.term} was handed over to {record.successor}")
    return Wait(f"{record.holder} holds term {record.term}")


def may_serve(*, last_renewed_ms: int | None, now_ms: int, renew_deadline_ms: int) -> bool:
    """Whether the holder may still accept writes: a renewal younger than the deadline."""
    return last_renewed_ms is not None and now_ms - last_renewed_ms < renew_deadline_ms
