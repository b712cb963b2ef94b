"""The replication stream: frames from a leader, and how a follower takes them (issue 18).

A leader streams its commit log to each follower from the end the follower acknowledged.
A frame never crosses an epoch boundary (RocketMQ 5 cuts batches the same way, anchors
§2.6), so the epoch and the epoch's start offset in its header say which term wrote every
byte in it. All integers big-endian::

    i64 offset | i32 term | i32 epoch | i64 epoch start | i64 commit offset | u32 length | bytes

``term`` is the sender's leadership term (the fencing token); ``epoch`` is the term that
wrote these bytes (older than ``term`` while a new leader streams records of earlier terms).
A frame of length 0 is a heartbeat: it moves the commit offset and proves the term.

A follower applies a frame (:func:`apply`) only when

1. its term is not below the highest term the follower has seen (a deposed leader's
   frames are refused: fencing on the data path, not by timing);
2. it starts at the follower's end (the stream is contiguous; anything else is refused and
   the leader restarts from the acknowledged end);
3. its epoch is the follower's last epoch, or a later one starting at or after that
   epoch's start and no later than the frame: a new epoch is recorded before its bytes.

Its commit offset becomes the smaller of the leader's and its own end: it never claims
records it does not hold (anchors §2.5).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from popbroker.replication.rules import EpochHistory, ReplicationRuleError

HEADER = struct.Struct(">qiiqqI")


@dataclass(frozen=True, slots=True)
class Frame:
    offset: int
    term: int
    epoch: int
    epoch_start: int
    commit_offset: int
    data: bytes = b""


def encode(frame: Frame) -> bytes:
    head = HEADER.pack(
        frame.offset,
        frame.term,
        frame.epoch,
        frame.epoch_start,
        frame.commit_offset,
        len(frame.data),
    )
    return head + frame.data


def decode(raw: bytes) -> Frame:
    """One whole frame; ``ReplicationRuleError`` when its length does not match."""
    if len(raw) < HEADER.size:
        raise ReplicationRuleError(f"frame of {len(raw)} bytes is shorter than its header")
    offset, term, epoch, epoch_start, commit, length = HEADER.unpack_from(raw)
    if len(raw) != HEADER.size + length:
        raise ReplicationRuleError(f"frame says {length} bytes, carries {len(raw) - HEADER.size}")
    return Frame(offset, term, epoch, epoch_start, commit, raw[HEADER.size :])


@dataclass(frozen=True, slots=True)
class FollowerState:
    """What a follower knows: its epoch history, log end, highest term seen, commit offset."""

    history: EpochHistory
    end: int
    term: int
    commit_offset: int = 0


class Refused(ReplicationRuleError):
    """A frame the follower does not apply; ``stale`` when it came from a deposed leader."""

    def __init__(self, message: str, *, stale: bool = False) -> None:
        super().__init__(message)
        self.stale = stale


def apply(state: FollowerState, frame: Frame) -> FollowerState:
    """The follower's state once ``frame`` is applied (its bytes written at ``state.end``)."""
    if frame.term < state.term:
        raise Refused(f"term {frame.term} is behind {state.term}", stale=True)
    if frame.epoch > frame.term:
        raise Refused(f"epoch {frame.epoch} is after the sender's term {frame.term}")
    if frame.offset != state.end:
        raise Refused(f"frame at {frame.offset}, the log ends at {state.end}")
    history = state.history
    if frame.data and frame.epoch != history.last_epoch:
        last_start = history.entries[-1].start_offset if history.entries else 0
        if frame.epoch < history.last_epoch:
            raise Refused(f"epoch {frame.epoch} is before the log's {history.last_epoch}")
        if not last_start <= frame.epoch_start <= frame.offset:
            raise Refused(
                f"epoch {frame.epoch} starts at {frame.epoch_start}, outside "
                f"[{last_start}, {frame.offset}]"
            )
        history = history.with_entry(frame.epoch, frame.epoch_start)
    end = state.end + len(frame.data)
    return replace(
        state,
        history=history,
        end=end,
        term=frame.term,
        commit_offset=max(state.commit_offset, min(frame.commit_offset, end)),
    )
