"""Revive-log records: ``ck``, ``ack`` and ``bAck`` bodies, encoded and strictly decoded.

Purpose: the popack role appends checkpoints and acks to the revive log
(``rmq_sys_REVIVE_LOG_<cluster>``, one queue per revive queue id); the revive
role reads them back. This module owns the bytes of those record bodies.

Format: a record is a tag plus a compact JSON object (UTF-8, no spaces,
keys in the order below) using RocketMQ's short keys (fact sheet §2.1/§2.2)
and a format version ``"v"``:

  * tag ``ck`` — a checkpoint::

        {"v":1,"so":100,"pt":1722325671049,"it":60000,"bm":0,"n":3,"q":1,
         "t":"orders","c":"billing","d":[0,1,5],"bn":"broker-a","rp":0}

    ``so`` start queue offset, ``pt`` pop time (ms), ``it`` invisible time
    (ms), ``bm`` ack bitmap, ``n`` message count (= ``len(d)``), ``q`` queue
    id, ``t`` topic read (may be a retry topic), ``c`` group, ``d`` queue
    offset diffs, ``bn`` broker name, ``rp`` reput times (an integer; RocketMQ
    writes a numeric string — we never read RocketMQ's logs). The revive queue
    id is not in the body: it is the queue the record lives in, so
    :func:`decode` takes it as a parameter.
    **Our design writes a CK with the bitmap known in memory at flush time**,
    so acks merged in memory before the flush need no separate ACK records.
  * tag ``ack`` — one acked message::

        {"v":1,"ao":101,"so":100,"c":"billing","t":"orders","q":1,"pt":1722325671049,
         "bn":"broker-a"}

  * tag ``bAck`` — several acked messages of one CK: as ``ack`` with
    ``"ao":-1`` plus ``"aol":[101,102]`` (1..32 offsets).

``bn`` is optional on acks only: an ack without it matches CKs of the local
broker (upstream #8460). We always write it (upstream #8835 lost acks that
lacked it).

Format version: every body we write carries ``"v": FORMAT_VERSION`` (1).
Bodies written before the version existed have no ``"v"`` and read as
version 1. A reader does not refuse a newer version: it reads the keys it
knows and **skips keys it does not know**, so a writer may add a field in a
rolling upgrade and an older revive role still reads the record (it must
never drop a CK because a newer popack wrote it). A change that an older
reader would misread — a key whose meaning or type changes, a required key
removed — needs a new tag, not a new ``"v"``.

Decoding rules: the body must be at most ``MAX_RECORD_BYTES``, valid UTF-8
JSON, an object holding every required key; ``"v"``, when present, a
positive integer; integers must be JSON integers (not booleans, floats or
strings) in range; strings non-empty and at most ``MAX_NAME_CHARS``. Unknown
keys are skipped. Any violation raises
:class:`~popbroker.pop.errors.MalformedRecord` — never ``KeyError``,
``TypeError``, ``RecursionError`` or a JSON error.

Callers: the services layer (flushing the checkpoint buffer, writing acks,
change-invisible) encodes; the revive role decodes every record it scans and
counts malformed ones instead of stalling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from popbroker.pop import checkpoints, errors

CK_TAG: Final = "ck"
ACK_TAG: Final = "ack"
BATCH_ACK_TAG: Final = "bAck"
MAX_RECORD_BYTES = 8192
MAX_NAME_CHARS = 1024
FORMAT_VERSION: Final = 1
VERSION_KEY: Final = "v"
_MAX_INT = 2**63 - 1

_CK_KEYS = frozenset({"so", "pt", "it", "bm", "n", "q", "t", "c", "d", "bn", "rp"})
_ACK_KEYS = frozenset({"ao", "so", "c", "t", "q", "pt", "bn"})
_BATCH_ACK_KEYS = _ACK_KEYS | {"aol"}


@dataclass(frozen=True, slots=True)
class AckRecord:
    """An ack (one offset) or batch ack (several offsets) of one checkpoint.

    ``broker_name`` is None only for records decoded without ``bn``; such an
    ack matches the local broker's checkpoints (see :func:`ack_key`).
    """

    topic: str
    group: str
    queue_id: int
    start_queue_offset: int
    pop_time_ms: int
    broker_name: str | None
    ack_queue_offsets: tuple[int, ...]

    @property
    def is_batch(self) -> bool:
        """True when encoded as ``bAck`` (more than one offset)."""
        return len(self.ack_queue_offsets) > 1


@dataclass(frozen=True, slots=True)
class EncodedRecord:
    """A record ready to append: its tag and its JSON body."""

    tag: str
    body: bytes


Record = checkpoints.Checkpoint | AckRecord


def ack_key(ack: AckRecord, *, local_broker_name: str) -> checkpoints.CheckpointKey:
    """The checkpoint key ``ack`` matches; a missing broker name means the local broker."""
    return checkpoints.CheckpointKey(
        topic=ack.topic,
        group=ack.group,
        queue_id=ack.queue_id,
        start_queue_offset=ack.start_queue_offset,
        pop_time_ms=ack.pop_time_ms,
        broker_name=ack.broker_name if ack.broker_name is not None else local_broker_name,
    )


def ack_for(key: checkpoints.CheckpointKey, ack_queue_offsets: tuple[int, ...]) -> AckRecord:
    """The ack record that acks ``ack_queue_offsets`` of the checkpoint with ``key``."""
    return AckRecord(
        topic=key.topic,
        group=key.group,
        queue_id=key.queue_id,
        start_queue_offset=key.start_queue_offset,
        pop_time_ms=key.pop_time_ms,
        broker_name=key.broker_name,
        ack_queue_offsets=ack_queue_offsets,
    )


def encode(record: Record) -> EncodedRecord:
    """Encode a checkpoint or an ack record as tag + compact JSON body."""
    if isinstance(record, checkpoints.Checkpoint):
        return _encode_checkpoint(record)
    return _encode_ack(record)


def _encode_checkpoint(ck: checkpoints.Checkpoint) -> EncodedRecord:
    body = {
        VERSION_KEY: FORMAT_VERSION,
        "so": ck.start_queue_offset,
        "pt": ck.pop_time_ms,
        "it": ck.invisible_ms,
        "bm": ck.ack_bitmap,
        "n": ck.count,
        "q": ck.queue_id,
        "t": ck.topic,
        "c": ck.group,
        "d": list(ck.queue_offset_diffs),
        "bn": ck.broker_name,
        "rp": ck.reput_times,
    }
    return EncodedRecord(tag=CK_TAG, body=_dump(body))


def _encode_ack(ack: AckRecord) -> EncodedRecord:
    if not ack.ack_queue_offsets:
        raise errors.MalformedRecord("an ack record needs at least one queue offset")
    body: dict[str, Any] = {
        VERSION_KEY: FORMAT_VERSION,
        "ao": -1 if ack.is_batch else ack.ack_queue_offsets[0],
        "so": ack.start_queue_offset,
        "c": ack.group,
        "t": ack.topic,
        "q": ack.queue_id,
        "pt": ack.pop_time_ms,
    }
    if ack.broker_name is not None:
        body["bn"] = ack.broker_name
    if ack.is_batch:
        body["aol"] = list(ack.ack_queue_offsets)
        return EncodedRecord(tag=BATCH_ACK_TAG, body=_dump(body))
    return EncodedRecord(tag=ACK_TAG, body=_dump(body))


def _dump(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode(tag: str, body: bytes, *, revive_queue_id: int) -> Record:
    """Decode one revive-log record found in revive queue ``revive_queue_id``.

    Raises :class:`MalformedRecord` for an unknown tag or any malformed body.
    """
    if tag not in (CK_TAG, ACK_TAG, BATCH_ACK_TAG):
        raise errors.MalformedRecord(f"unknown revive record tag {tag!r}")
    obj = _load(body)
    if tag == CK_TAG:
        return _decode_checkpoint(obj, revive_queue_id)
    return _decode_ack(obj, batch=tag == BATCH_ACK_TAG)


def _load(body: bytes) -> dict[str, Any]:
    if len(body) > MAX_RECORD_BYTES:
        raise errors.MalformedRecord(f"record body longer than {MAX_RECORD_BYTES} bytes")
    try:
        obj = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        raise errors.MalformedRecord(f"record body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise errors.MalformedRecord("record body is not a JSON object")
    return obj


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def _decode_checkpoint(obj: dict[str, Any], revive_queue_id: int) -> checkpoints.Checkpoint:
    _check_keys(obj, required=_CK_KEYS)
    diffs = _int_list(obj, "d", max_len=checkpoints.MAX_CHECKPOINT_MESSAGES)
    if _int(obj, "n") != len(diffs):
        raise errors.MalformedRecord("ck field n differs from the length of d")
    try:
        return checkpoints.Checkpoint(
            topic=_name(obj, "t"),
            group=_name(obj, "c"),
            queue_id=_int(obj, "q"),
            start_queue_offset=_int(obj, "so"),
            pop_time_ms=_int(obj, "pt"),
            invisible_ms=_int(obj, "it"),
            revive_queue_id=revive_queue_id,
            broker_name=_name(obj, "bn"),
            queue_offset_diffs=diffs,
            ack_bitmap=_int(obj, "bm"),
            reput_times=_int(obj, "rp"),
        )
    except errors.InvalidCheckpoint as exc:
        raise errors.MalformedRecord(f"ck record: {exc.reason}") from None


def _decode_ack(obj: dict[str, Any], *, batch: bool) -> AckRecord:
    if batch:
        _check_keys(obj, required=_BATCH_ACK_KEYS - {"bn"})
        if not (_is_int(obj["ao"]) and obj["ao"] == -1):
            raise errors.MalformedRecord("bAck record must carry ao = -1")
        offsets = _int_list(obj, "aol", max_len=checkpoints.MAX_CHECKPOINT_MESSAGES)
        if not offsets:
            raise errors.MalformedRecord("bAck record has an empty aol")
    else:
        _check_keys(obj, required=_ACK_KEYS - {"bn"})
        offsets = (_int(obj, "ao"),)
    return AckRecord(
        topic=_name(obj, "t"),
        group=_name(obj, "c"),
        queue_id=_int(obj, "q"),
        start_queue_offset=_int(obj, "so"),
        pop_time_ms=_int(obj, "pt"),
        broker_name=_name(obj, "bn") if "bn" in obj else None,
        ack_queue_offsets=offsets,
    )


def _check_keys(obj: dict[str, Any], *, required: frozenset[str]) -> None:
    """Every required key is present and the version, if any, is valid; other keys are skipped."""
    missing = required - frozenset(obj)
    if missing:
        raise errors.MalformedRecord(f"record lacks keys {sorted(missing)}")
    if VERSION_KEY in obj:
        version = obj[VERSION_KEY]
        if not _is_int(version) or not 0 < version <= _MAX_INT:
            raise errors.MalformedRecord("record field v is not a positive integer")


def _is_int(value: object) -> bool:
    return type(value) is int  # bool is a subclass of int; JSON true is not an offset


def _int(obj: dict[str, Any], key: str) -> int:
    value = obj[key]
    if not _is_int(value) or not 0 <= value <= _MAX_INT:
        raise errors.MalformedRecord(f"record field {key} is not an integer in 0..2**63-1")
    result: int = value
    return result


def _int_list(obj: dict[str, Any], key: str, *, max_len: int) -> tuple[int, ...]:
    value = obj[key]
    if not isinstance(value, list) or len(value) > max_len:
        raise errors.MalformedRecord(f"record field {key} is not a list of <= {max_len} items")
    if not all(_is_int(item) and 0 <= item <= _MAX_INT for item in value):
        raise errors.MalformedRecord(f"record field {key} holds a non-integer or negative item")
    return tuple(value)


def _name(obj: dict[str, Any], key: str) -> str:
    value = obj[key]
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS:
        raise errors.MalformedRecord(f"record field {key} is not a non-empty string")
    return value
