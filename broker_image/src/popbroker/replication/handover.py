"""A planned hand-over of a broker set's leadership (issue 18): what may be handed to whom,
and the refusals. The I/O is ``Replica.hand_over``'s (``popbroker.replicator.replica``);
the admin API's ``HandOver`` asks for it, and the operator does before it restarts a
leader in a rolling update (followers first, then the leader, once).

The leader stops taking writes, waits until its successor holds everything it has (the log
to its end, the config and the committed offsets as they were when writes stopped), then
releases the Lease naming the successor, which takes the next term at its next round; the
others wait the lease time first (``popbroker.replication.lease``). A hand-over therefore
loses nothing and redelivers nothing, in SYNC and in ASYNC mode alike. If the successor does
not catch up in time, the leader takes writes again and nothing has changed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


class HandOverRefused(Exception):
    """A hand-over that did not happen; the leader leads on as before (or never led).

    ``reason``: ``NOT_LEADER`` (ask the replica the Lease names), ``NO_SUCCESSOR`` (no
    in-sync follower, or the one named is not), ``HAND_OVER_TIMEOUT`` (the successor did
    not catch up in time; retriable), ``HAND_OVER_FAILED`` (the Lease write failed; the
    leader leads again at its next round; retriable)."""

    def __init__(self, message: str, *, reason: str, retriable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.retriable = retriable


def choose_successor(
    me: str, *, in_sync: Collection[str], acked: Mapping[str, int], wanted: str | None
) -> str:
    """The follower to hand over to: ``wanted`` when it is an in-sync follower, else (none
    wanted) the in-sync follower furthest along (ties by name); ``NO_SUCCESSOR`` otherwise."""
    followers = sorted(set(in_sync) - {me})
    if wanted:
        if wanted not in followers:
            raise HandOverRefused(
                f"{wanted} is not an in-sync follower of {me} (in sync: "
                f"{', '.join(followers) or 'none'})",
                reason="NO_SUCCESSOR",
            )
        return wanted
    if not followers:
        raise HandOverRefused(f"{me} has no in-sync follower to hand over to",
                              reason="NO_SUCCESSOR")  # fmt: skip
    return min(followers, key=lambda name: (-acked.get(name, -1), name))
