"""The replication connection between a leader's store and a follower's (issue 18), and a
leader's SYNC appends over it.

One TCP connection per follower, opened by the follower. Every message is ``u32 length |
u8 kind | payload``, integers big-endian:

====  ==================  ==========================================================
kind  direction           payload
====  ==================  ==========================================================
H     follower → leader   u16 len + token, i32 follower's term, u16 len + its name
E     leader → follower   i32 term, i64 log end, u32 n, n times (i32 epoch, i64 start)
F     follower → leader   i64 the offset to stream from (after its cut)
B     leader → follower   i64 the leader's log start, JSON: each queue's first offset there
                          and the epochs begun by then; the answer to an F below the
                          leader's log start (retention took the head): the follower
                          begins its log there (``LocalStore.begin_log_at``), then sends F
R     leader → follower   a replication frame (``popbroker.replication.stream``)
A     follower → leader   i64 the follower's log end, durable as its flush mode promises
S     leader → follower   i64 config generation, i64 offsets version, JSON: the config
                          and/or the committed offsets (``LocalStore.state_snapshot``)
V     follower → leader   i64 the config generation it applied, durably
O     follower → leader   i64 the offsets version it applied (a hand-over waits for the
                          successor to hold the leader's last offsets)
X     either              UTF-8 reason; the sender closes
====  ==================  ==========================================================

The token is the broker set's shared secret (compared in constant time); a wrong one is
refused before anything else. A follower that has seen a later term than the leader's
refuses it (a deposed leader is fenced by the followers, not by timing). The follower
cuts its log where the histories part (``FollowerLog.follow``), asks for the rest, and
acknowledges each frame once applied; the leader keeps each follower's acknowledged end,
and its commit offset is the rules' (``popbroker.replication.rules.commit_offset``). With
nothing new the leader sends an empty frame every ``heartbeat_s``: it moves the commit
offset and proves the term.

The state outside the log (topics, groups, modes, committed offsets) goes as ``S``
snapshots on the same connection: first in full, then the config whenever it changed and the
offsets when they changed, at most every ``state_interval_s``. A snapshot is taken after
the frame it precedes is cut, so a follower knows every topic the frame's records name. A
follower applies a snapshot before the frames after it, and acknowledges a config with
``V`` once it is on disk: a leader's config write is answered when every in-sync follower
has it (:meth:`SyncAppends.config_replicated`). Offsets are not waited for: after a
failover they may be behind by up to ``state_interval_s``, which redelivers, never loses
(as a single store's offsets persisted every interval). A follower also reports the offsets
version it applied (``O``): a planned hand-over (``Replica.hand_over``) waits for its
successor to hold the log, the config and the offsets as they were when writes stopped, so
it redelivers nothing. A leader older than ``O`` ignores it (unknown kinds are skipped).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import struct
from collections.abc import Callable, Sequence
from typing import Any

from popbroker.replication import rules, stream
from popbroker.replication.rules import EpochEntry, EpochHistory, ReplicationRuleError
from popbroker.replicator.logs import FollowerLog, LeaderLog
from popbroker.store.api import AppendResult, MessageToAppend
from popbroker.store.errors import NotEnoughReplicas, ReplicationTimeout
from popbroker.store.local import LocalStore

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 << 20
FRAME_BYTES = 1 << 20  # the most log bytes in one frame
_HEAD = struct.Struct(">IB")
_I64 = struct.Struct(">q")
_EPOCHS_HEAD = struct.Struct(">iqI")
_EPOCH = struct.Struct(">iq")
_TERM = struct.Struct(">i")
_U16 = struct.Struct(">H")
_VERSIONS = struct.Struct(">qq")


class ReplicationRefused(Exception):
    """The other side refused the connection (``X``), or said something out of turn."""


async def _send(writer: asyncio.StreamWriter, kind: bytes, payload: bytes = b"") -> None:
    writer.write(_HEAD.pack(len(payload) + 1, kind[0]) + payload)
    await writer.drain()


async def _receive(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    size, kind = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    if not 1 <= size <= MAX_MESSAGE_BYTES:
        raise ReplicationRefused(f"message of {size} bytes")
    payload = await reader.readexactly(size - 1)
    if kind == ord("X"):
        raise ReplicationRefused(payload.decode("utf-8", "replace"))
    return bytes([kind]), payload


def _string16(raw: bytes, at: int) -> tuple[bytes, int]:
    (size,) = _U16.unpack_from(raw, at)
    value = raw[at + 2 : at + 2 + size]
    if len(value) != size:
        raise ReplicationRefused("string cut short")
    return value, at + 2 + size


class Leader:
    """Serves followers from a leader's store (module docstring)."""

    def __init__(
        self,
        store: LocalStore,
        *,
        term: int,
        token: bytes,
        heartbeat_s: float = 1.0,
        state_interval_s: float = 0.2,
    ) -> None:
        self._store = store
        self._log = LeaderLog(store, term=term)
        self._token = token
        self._heartbeat_s = heartbeat_s
        self._state_interval_s = state_interval_s
        self.acked: dict[str, int] = {}
        self.config_acked: dict[str, int] = {}  # the config generation each follower holds
        self.offsets_acked: dict[str, int] = {}  # the offsets version each follower holds
        self.ack_progress = asyncio.Condition()  # notified on every acknowledgement
        self._grew = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()  # one per follower served
        self._watch: asyncio.Task[None] | None = None
        self.on_deposed: Callable[[int], None] = lambda term: None
        # every acknowledgement, with the leader's end when it arrived (the in-sync set's lag)
        self.on_ack: Callable[[str, int, int], None] = lambda name, end, leader_end: None

    @property
    def term(self) -> int:
        return self._log.term

    def commit_offset(self, members: list[str]) -> int:
        """The rules' commit offset over ``members`` (the leader's name is ``""``)."""
        return rules.commit_offset(
            "", leader_end=self._store.commitlog.end, acked=self.acked, members=["", *members]
        )

    def poke(self) -> None:
        """Send what changed now rather than at the next heartbeat (a config write waits)."""
        self._grew.set()

    def config_committed(self, generation: int, members: list[str]) -> bool:
        """Whether every follower in ``members`` holds config generation ``generation``."""
        return all(self.config_acked.get(name, -1) >= generation for name in members)

    async def start(self, host: str, port: int) -> int:
        self._watch = asyncio.create_task(self._watch_arrivals())
        self._server = await asyncio.start_server(self._serve, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop serving: the listening socket and every follower's connection. A leader that
        steps down must not stream on: its log may be truncated by its next term's leader."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch

    async def _watch_arrivals(self) -> None:
        async for _arrival in self._store.arrivals():
            self._grew.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        if me is not None:
            self._connections.add(me)
        name = "?"
        try:
            name = await self._hello(reader, writer)
            offset = await _receive_offset(reader)
            start, queues, epochs = self._store.log_head()
            if offset < start:  # the follower ends before this log begins: it begins there
                log.info("replication to %s: its log ends at %d, this one begins at %d",
                         name, offset, start)  # fmt: skip
                head = {"queues": [[t, q, n] for (t, q), n in sorted(queues.items())],
                        "epochs": [list(e) for e in epochs]}  # fmt: skip
                await _send(writer, b"B", _I64.pack(start) + json.dumps(head).encode())
                offset = await _receive_offset(reader)
                if offset < self._store.commitlog.min_offset:
                    raise ReplicationRefused(f"asked for {offset}, below the log's start")
            self.config_acked.pop(name, None)  # a new connection starts from a full snapshot
            self.offsets_acked.pop(name, None)
            acks = asyncio.create_task(self._read_acks(reader, name))
            try:
                await self._stream(writer, offset, acks)
            finally:
                acks.cancel()
        except (ReplicationRefused, ReplicationRuleError) as exc:
            log.warning("replication to %s refused: %s", name, exc)
            with contextlib.suppress(OSError):
                await _send(writer, b"X", str(exc).encode())
        except (asyncio.IncompleteReadError, OSError) as exc:  # reset, unreachable, timed out
            log.info("replication to %s: connection closed (%r)", name, exc)
        except Exception:  # a bug: said now, not when asyncio collects the task
            log.exception("replication to %s failed", name)
        finally:
            if me is not None:
                self._connections.discard(me)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        kind, payload = await _receive(reader)
        if kind != b"H":
            raise ReplicationRefused("expected H")
        token, at = _string16(payload, 0)
        if not hmac.compare_digest(token, self._token):
            raise ReplicationRefused("wrong replication token")
        (term,) = _TERM.unpack_from(payload, at)
        raw_name, _ = _string16(payload, at + _TERM.size)
        if term > self.term:
            self.on_deposed(term)
            raise ReplicationRefused(f"follower has seen term {term}, this leader's is {self.term}")
        epochs = self._store.epochs()
        await _send(
            writer,
            b"E",
            _EPOCHS_HEAD.pack(self.term, self._store.commitlog.end, len(epochs))
            + b"".join(_EPOCH.pack(epoch, start) for epoch, start in epochs),
        )
        return raw_name.decode("utf-8", "replace")

    async def _read_acks(self, reader: asyncio.StreamReader, name: str) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, OSError, ReplicationRefused):
            while True:
                kind, payload = await _receive(reader)
                if kind == b"A" and len(payload) == _I64.size:
                    self.acked[name] = _I64.unpack(payload)[0]
                    self.on_ack(name, self.acked[name], self._store.commitlog.end)
                elif kind == b"V" and len(payload) == _I64.size:
                    self.config_acked[name] = _I64.unpack(payload)[0]
                elif kind == b"O" and len(payload) == _I64.size:
                    self.offsets_acked[name] = _I64.unpack(payload)[0]
                else:
                    continue
                async with self.ack_progress:
                    self.ack_progress.notify_all()

    async def _stream(
        self, writer: asyncio.StreamWriter, offset: int, acks: asyncio.Task[None]
    ) -> None:
        loop = asyncio.get_running_loop()
        sent, sent_at = (-1, -1), -float("inf")  # the versions this follower has, and when
        while not acks.done():
            self._grew.clear()
            frame = self._log.frame(
                offset, max_bytes=FRAME_BYTES, commit_offset=self.commit_offset(list(self.acked))
            )
            # the state after the frame is cut: it knows every topic the frame's records name
            config_now, offsets_now = self._store.state_version()
            config = config_now != sent[0]
            offsets = offsets_now != sent[1] and loop.time() - sent_at >= self._state_interval_s
            if config or offsets:
                version, snapshot = self._store.state_snapshot(config=config, offsets=offsets)
                sent = (version[0] if config else sent[0], version[1] if offsets else sent[1])
                sent_at = loop.time() if offsets else sent_at
                await _send(writer, b"S", _VERSIONS.pack(*sent) + snapshot)
            await _send(writer, b"R", stream.encode(frame))
            offset += len(frame.data)
            if not frame.data:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._grew.wait(), self._heartbeat_s)


async def _receive_offset(reader: asyncio.StreamReader) -> int:
    kind, payload = await _receive(reader)
    if kind != b"F" or len(payload) != _I64.size:
        raise ReplicationRefused("expected F")
    return int(_I64.unpack(payload)[0])


def _log_head(payload: bytes) -> tuple[int, dict[tuple[str, int], int], list[tuple[int, int]]]:
    """A ``B`` message: the leader's log start, queue starts and epochs."""
    try:
        (start,) = _I64.unpack_from(payload)
        head = json.loads(payload[_I64.size :])
        queues = {(str(t), int(q)): int(n) for t, q, n in head["queues"]}
        epochs = [(int(e), int(s)) for e, s in head["epochs"]]
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise ReplicationRefused(f"malformed B: {exc}") from exc
    return int(start), queues, epochs


class Follower:
    """Follows a leader into a follower's store (module docstring)."""

    def __init__(self, store: LocalStore, *, name: str, token: bytes) -> None:
        self.log = FollowerLog(store)
        self._store = store
        self._name = name
        self._token = token
        self.progress = asyncio.Condition()

    async def run(self, host: str, port: int) -> None:
        """Follow until the connection ends (then return) or a refusal (raised)."""
        reader, writer = await asyncio.open_connection(host, port)
        try:
            name = self._name.encode()
            await _send(
                writer,
                b"H",
                _U16.pack(len(self._token)) + self._token + _TERM.pack(self.log.state.term)
                + _U16.pack(len(name)) + name,
            )  # fmt: skip
            kind, payload = await _receive(reader)
            if kind != b"E":
                raise ReplicationRefused("expected E")
            term, leader_end, count = _EPOCHS_HEAD.unpack_from(payload)
            entries = tuple(
                EpochEntry(*_EPOCH.unpack_from(payload, _EPOCHS_HEAD.size + i * _EPOCH.size))
                for i in range(count)
            )
            try:
                start = await self.log.follow(
                    EpochHistory(entries), leader_end=leader_end, term=term
                )
            except ReplicationRuleError as exc:
                await _send(writer, b"X", str(exc).encode())
                raise
            await _send(writer, b"F", _I64.pack(start))
            while True:
                try:
                    kind, payload = await _receive(reader)
                except asyncio.IncompleteReadError:
                    return
                if kind == b"S" and len(payload) >= _VERSIONS.size:
                    config_generation, offsets_version = _VERSIONS.unpack_from(payload)
                    await self._store.apply_state(payload[_VERSIONS.size :])
                    await _send(writer, b"V", _I64.pack(config_generation))
                    await _send(writer, b"O", _I64.pack(offsets_version))
                elif kind == b"R":
                    state = await self.log.apply(stream.decode(payload))
                    await _send(writer, b"A", _I64.pack(state.end))
                elif kind == b"B":  # the leader's log begins past this one's end
                    state = await self.log.begin_at(*_log_head(payload), term=term)
                    await _send(writer, b"F", _I64.pack(state.end))
                else:
                    raise ReplicationRefused("expected R, S or B")
                async with self.progress:
                    self.progress.notify_all()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def wait_committed(
    leader: Leader, end: int, *, members: Callable[[], list[str]], timeout_s: float
) -> None:
    """Return once every follower ``members()`` names has acknowledged ``end``
    (``Leader.commit_offset``), asked again on every acknowledgement and every change of
    the set (``leader.ack_progress``); ``NotEnoughReplicas`` after ``timeout_s``."""
    await _wait(
        leader,
        lambda: leader.commit_offset(members()) >= end,
        timeout_s=timeout_s,
        failure=lambda: (
            f"in-sync replicas {members()} did not acknowledge {end} within "
            f"{timeout_s}s (acknowledged: {dict(leader.acked)})"
        ),
    )


async def wait_config_committed(
    leader: Leader, generation: int, *, members: Callable[[], list[str]], timeout_s: float
) -> None:
    """As :func:`wait_committed`, for config generation ``generation`` (``V``)."""
    leader.poke()
    await _wait(
        leader,
        lambda: leader.config_committed(generation, members()),
        timeout_s=timeout_s,
        failure=lambda: (
            f"in-sync replicas {members()} did not take config {generation} "
            f"within {timeout_s}s (they hold: {dict(leader.config_acked)})"
        ),
    )


async def _wait(
    leader: Leader, done: Callable[[], bool], *, timeout_s: float, failure: Callable[[], str]
) -> None:
    async def waiting() -> None:
        async with leader.ack_progress:
            await leader.ack_progress.wait_for(done)

    try:
        await asyncio.wait_for(waiting(), timeout_s)
    except TimeoutError:
        raise ReplicationTimeout(failure()) from None


class SyncAppends:
    """A leader's SYNC appends: refused before the append when the in-sync set is below
    ``min_in_sync`` (``rules.may_accept_writes``), answered once every follower whose
    acknowledgement counts has it (``rules.commit_offset``). ``in_sync`` names the followers
    in the recorded set (the leader is always in it); ``counted`` (default: the same) those
    a write waits for, which is more while a shrink is not yet recorded on the Lease.

    ``synchronous`` False is the ASYNC mode: a log write is answered after the leader's own
    write, neither checked against ``min_in_sync`` nor waited for; a failover may lose what
    the new leader had not received yet (at most ``max_lag_ms`` of writes, the in-sync
    set's bound). Config writes wait for the set in both modes: they are rare."""

    def __init__(
        self,
        store: LocalStore,
        leader: Leader,
        *,
        min_in_sync: int,
        timeout_s: float,
        synchronous: bool = True,
    ) -> None:
        self._store = store
        self._leader = leader
        self._min_in_sync = min_in_sync
        self._timeout_s = timeout_s
        self._synchronous = synchronous
        self.in_sync: list[str] = []
        self.counted: Callable[[], list[str]] = lambda: list(self.in_sync)

    async def append(self, messages: Sequence[MessageToAppend]) -> list[AppendResult]:
        if not self._synchronous:
            return await self._store.append(messages)
        self.check_members()
        return await self._replicated(await self._store.append(messages))

    async def append_records(self, records: Sequence[bytes]) -> list[AppendResult]:
        if not self._synchronous:
            return await self._store.append_records(records)
        self.check_members()
        return await self._replicated(await self._store.append_records(records))

    def check_members(self) -> None:
        """``NotEnoughReplicas`` when the in-sync set is below ``min_in_sync``."""
        members = list(self.in_sync)
        if not rules.may_accept_writes(["", *members], self._min_in_sync):
            raise NotEnoughReplicas(
                f"{1 + len(members)} in-sync replicas, {self._min_in_sync} needed"
            )

    async def config_replicated(self) -> None:
        """Return once every counted follower holds the leader's config as it is now (a
        config write on the leader answers after this); ``NotEnoughReplicas`` on timeout."""
        generation, _ = self._store.state_version()
        await wait_config_committed(
            self._leader, generation, members=self.counted, timeout_s=self._timeout_s
        )

    async def _replicated(self, results: list[AppendResult]) -> list[AppendResult]:
        end = max(r.physical_offset + r.size for r in results)
        await wait_committed(self._leader, end, members=self.counted, timeout_s=self._timeout_s)
        return results
