"""A leader's log as replication frames, and a follower's log built from them (issue 18,
the transport is ``popbroker.replicator.wire``).

:class:`LeaderLog` cuts frames out of the leader's store: from the offset a follower asks
for, at most ``max_bytes``, ending on a record or segment boundary
(``LocalStore.read_log``) and never across the start of an epoch, so a frame's header names
the one term that wrote all its bytes (:mod:`popbroker.replication.stream`).

:class:`FollowerLog` takes them: :func:`popbroker.replication.stream.apply` decides (a
deposed leader's term, a gap, an epoch out of order are refused before anything is
written), a new epoch is recorded durably before its bytes, and the bytes go to the store
as they are (``LocalStore.append_replicated``, which checks every record again).
:meth:`FollowerLog.follow` is what a follower does on a new term: cut its log at the
divergence point the rules give for the new leader's history (``LocalStore.truncate_log``),
or refuse when the histories share nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from popbroker.replication import stream
from popbroker.replication.rules import (
    EpochEntry,
    EpochHistory,
    ReplicationRuleError,
    divergence_point,
)
from popbroker.store.local import LocalStore


def history_of(store: LocalStore) -> EpochHistory:
    """The store's epoch history as the rules see it."""
    return EpochHistory(tuple(EpochEntry(epoch, start) for epoch, start in store.epochs()))


class LeaderLog:
    """Frames of a leader's log (module docstring)."""

    def __init__(self, store: LocalStore, *, term: int) -> None:
        self._store = store
        self.term = term

    def frame(self, offset: int, *, max_bytes: int, commit_offset: int) -> stream.Frame:
        """The frame a follower at ``offset`` gets next (empty at the log's end: a heartbeat
        that moves the commit offset and proves the term)."""
        epochs = self._store.epochs()
        current = [e for e in epochs if e[1] <= offset]
        if not current:
            raise ReplicationRuleError(f"no epoch holds offset {offset}: {epochs}")
        epoch, start = current[-1]
        later = [s for _, s in epochs if s > offset]
        limit = min(max_bytes, later[0] - offset) if later else max_bytes
        data = self._store.read_log(offset, limit)
        return stream.Frame(offset, self.term, epoch, start, commit_offset, data)


class FollowerLog:
    """A follower's log, built from a leader's frames (module docstring)."""

    def __init__(self, store: LocalStore) -> None:
        self._store = store
        self.state = stream.FollowerState(history_of(store), store.commitlog.end, term=store.term())

    async def follow(self, leader: EpochHistory, *, leader_end: int, term: int) -> int:
        """Start following a new term's leader: cut where the histories part; returns the
        offset to ask the leader for. ``ReplicationRuleError`` when they share nothing
        (the follower refuses rather than guess) or the term is stale."""
        if term < self.state.term:
            raise stream.Refused(f"term {term} is behind {self.state.term}", stale=True)
        self._store.record_term(term)  # before acting in it: fencing survives a restart
        point = divergence_point(
            leader, self.state.history, leader_end=leader_end, follower_end=self.state.end
        )
        if point is None:
            raise ReplicationRuleError("the leader's history shares no epoch with this log")
        if point < self.state.end:
            await self._store.truncate_log(point)
        self.state = stream.FollowerState(
            history_of(self._store), self._store.commitlog.end, term=term,
            commit_offset=min(self.state.commit_offset, point),
        )  # fmt: skip
        return self.state.end

    async def begin_at(
        self,
        start: int,
        queues: Mapping[tuple[str, int], int],
        epochs: Sequence[tuple[int, int]],
        *,
        term: int,
    ) -> stream.FollowerState:
        """Begin this log at ``start``, where the leader's begins (its head went with
        retention): everything held here lies below it (``LocalStore.begin_log_at``)."""
        if start <= self.state.end:
            raise ReplicationRuleError(
                f"the leader's log begins at {start}, within this log (ends {self.state.end})"
            )
        await self._store.begin_log_at(start, queues, epochs)
        self.state = stream.FollowerState(
            history_of(self._store), self._store.commitlog.end, term=term, commit_offset=start
        )
        return self.state

    async def apply(self, frame: stream.Frame) -> stream.FollowerState:
        """Apply one frame: checked, its epoch recorded before its bytes, then written."""
        after = stream.apply(self.state, frame)
        if after.term > self.state.term:
            self._store.record_term(after.term)
        if after.history != self.state.history:
            newest = after.history.entries[-1]
            self._store.record_epoch(newest.epoch, newest.start_offset)
        if frame.data:
            await self._store.append_replicated(frame.offset, frame.data)
        self.state = after
        return after
