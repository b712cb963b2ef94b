"""Replication frames and the follower's rule (``popbroker.replication.stream``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from popbroker.replication import stream
from popbroker.replication.rules import EpochEntry, EpochHistory, ReplicationRuleError
from popbroker.replication.stream import FollowerState, Frame


def fresh(term: int = 0) -> FollowerState:
    return FollowerState(EpochHistory(), end=0, term=term)


@given(
    st.builds(
        Frame,
        offset=st.integers(0, 2**62),
        term=st.integers(0, 2**31 - 1),
        epoch=st.integers(0, 2**31 - 1),
        epoch_start=st.integers(0, 2**62),
        commit_offset=st.integers(0, 2**62),
        data=st.binary(max_size=64),
    )
)
def test_frames_round_trip(frame: Frame) -> None:
    assert stream.decode(stream.encode(frame)) == frame


def test_a_frame_of_the_wrong_length_is_refused() -> None:
    raw = stream.encode(Frame(0, 1, 1, 0, 0, b"abc"))
    with pytest.raises(ReplicationRuleError, match="says 3 bytes, carries 2"):
        stream.decode(raw[:-1])
    with pytest.raises(ReplicationRuleError, match="shorter than its header"):
        stream.decode(raw[:10])


@st.composite
def leader_logs(draw: st.DrawFn) -> tuple[list[tuple[int, bytes]], int]:
    """A leader's log as (epoch, bytes) runs in growing epochs, and its current term."""
    epochs = sorted(draw(st.sets(st.integers(1, 50), min_size=1, max_size=5)))
    runs = [(e, draw(st.binary(min_size=1, max_size=40))) for e in epochs]
    return runs, epochs[-1] + draw(st.integers(0, 3))


@given(leader_logs(), st.data())
def test_any_split_of_the_leaders_log_rebuilds_it_on_the_follower(
    log: tuple[list[tuple[int, bytes]], int], data: st.DataObject
) -> None:
    runs, term = log
    history, offset, frames = EpochHistory(), 0, []
    for epoch, payload in runs:
        history = history.with_entry(epoch, offset)
        at = 0
        while at < len(payload):  # frames never cross an epoch boundary
            size = data.draw(st.integers(1, len(payload) - at))
            frames.append(Frame(offset + at, term, epoch, offset, offset, payload[at : at + size]))
            at += size
        offset += len(payload)
    state = fresh()
    written = b""
    for frame in frames:
        state = stream.apply(state, frame)
        written += frame.data
    state = stream.apply(state, Frame(state.end, term, term, 0, offset))  # a heartbeat
    assert state.history == history
    assert state.end == offset and written == b"".join(p for _, p in runs)
    assert state.commit_offset == offset and state.term == term


def test_refusals() -> None:
    state = stream.apply(fresh(), Frame(0, 3, 3, 0, 0, b"xx"))
    assert state.history.entries == (EpochEntry(3, 0),) and state.end == 2
    with pytest.raises(stream.Refused) as stale:  # a deposed leader's frame
        stream.apply(FollowerState(state.history, 2, term=5), Frame(2, 4, 3, 0, 0, b"y"))
    assert stale.value.stale
    with pytest.raises(stream.Refused, match="the log ends at 2"):
        stream.apply(state, Frame(3, 3, 3, 0, 0, b"y"))
    with pytest.raises(stream.Refused, match="before the log's 3"):
        stream.apply(state, Frame(2, 4, 2, 0, 0, b"y"))
    with pytest.raises(stream.Refused, match="outside"):
        stream.apply(state, Frame(2, 4, 4, 5, 0, b"y"))
    with pytest.raises(stream.Refused, match="after the sender's term"):
        stream.apply(state, Frame(2, 4, 6, 2, 0, b"y"))
    # the commit offset never passes what the follower holds, and never goes back
    later = stream.apply(state, Frame(2, 4, 4, 2, 100, b"yy"))
    assert later.commit_offset == 4 and later.term == 4
    assert stream.apply(later, Frame(4, 4, 4, 2, 1)).commit_offset == 4
