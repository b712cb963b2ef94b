"""Byte layouts of the commit log and the consume queue.

Commit-log record (version 1). All integers big-endian; the record never spans
two segment files::

    offset  width  field
    0       4      total_size        u32, whole record including this field
    4       1      magic             0xB1 = message record v1, 0xE0 = end-of-segment filler
    5       4      crc32             zlib CRC-32 of bytes [9, total_size)
    9       8      physical_offset   i64, this record's own position in the log
    17      4      queue_id          i32
    21      8      queue_offset      i64
    29      2      flags             u16, producer flags (opaque to the store)
    31      8      born_ts_ms        i64
    39      8      store_ts_ms       i64
    47      4      reconsume_times   u32
    51      1      topic_len         u8, then topic bytes (UTF-8, <= 255)
    ..      1      born_host_len     u8, then born_host bytes (UTF-8, <= 255)
    ..      4      properties_len    u32, then properties: UTF-8 "k\\x01v\\x02" pairs
    ..      4      body_len          u32, then body bytes

The CRC covers everything after itself, so a torn write (short record), a flipped
byte anywhere in the record, or garbage after the tail fails verification. The
stored ``physical_offset`` must equal the position the record is read from, which
catches stale bytes from an earlier life of a reused file. ``total_size`` is
bounded by the segment size, so a corrupt length cannot make a reader run away.

End-of-segment filler: when a record does not fit in the rest of a segment, the
writer puts ``total_size = rest`` and magic ``0xE0`` there (if at least 5 bytes
remain; fewer are simply left zero) and starts the next segment. Readers jump to
the next segment on a filler or on a tail shorter than 5 bytes.

Consume-queue entry: exactly 20 bytes, big-endian::

    0   8  physical_offset   i64
    8   4  size              u32, total_size of the record
    12  8  tag_hash          i64, see ``popbroker.store.filters``

Entry ``n`` of a queue lives at byte ``(n - file_first_offset) * 20`` of the file
named after ``file_first_offset``. An all-zero entry is never valid (record 0
sits at physical offset 0 but has a non-zero size), which is how a reader spots a
hole left by a crash. The entry ``(-1, 1, 0)`` (:data:`CQ_BELOW_LOG`) stands for a record
below the log's start: a queue that begins mid-log (a follower begun where its leader's
retention left it) is written with it up to its first offset; nothing reads it, and
opening the store moves the queue's minimum past it as past any record retention took.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from popbroker.values import per_message

MAGIC_MESSAGE_V1 = 0xB1
MAGIC_END_OF_SEGMENT = 0xE0

_PREFIX = struct.Struct(">IBI")  # total_size, magic, crc32
_FIXED = struct.Struct(
    ">qiqHqqI"
)  # physical, queue_id, queue_offset, flags, born, store, reconsume
_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
PREFIX_SIZE = _PREFIX.size  # 9
FIXED_END = PREFIX_SIZE + _FIXED.size  # 51
MIN_RECORD_SIZE = FIXED_END + 1 + 1 + 4 + 4
FILLER_MIN = 5  # total_size (4) + magic (1)

CQ_ENTRY = struct.Struct(">qIq")
CQ_ENTRY_SIZE = CQ_ENTRY.size  # 20
CQ_BELOW_LOG = (-1, 1, 0)  # an entry for a record below the log's start (docstring)

PROPERTY_SEPARATOR = "\x01"
PAIR_SEPARATOR = "\x02"


class FormatError(ValueError):
    """Bytes that are not a valid record at this position."""


@per_message
class Record:
    """A decoded commit-log record."""

    physical_offset: int
    total_size: int
    queue_id: int
    queue_offset: int
    flags: int
    born_timestamp_ms: int
    store_timestamp_ms: int
    reconsume_times: int
    topic: str
    born_host: str
    properties: dict[str, str]
    body: bytes


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """``k\\x01v\\x02`` pairs; keys and values must not contain the separators."""
    parts = []
    for key, value in properties.items():
        if any(sep in key or sep in value for sep in (PROPERTY_SEPARATOR, PAIR_SEPARATOR)):
            raise FormatError(f"property {key!r} contains a reserved separator byte")
        parts.append(f"{key}{PROPERTY_SEPARATOR}{value}{PAIR_SEPARATOR}")
    return "".join(parts).encode("utf-8")


def decode_properties(raw: bytes) -> dict[str, str]:
    text = raw.decode("utf-8")
    result: dict[str, str] = {}
    for pair in text.split(PAIR_SEPARATOR):
        if not pair:
            continue
        key, sep, value = pair.partition(PROPERTY_SEPARATOR)
        if not sep:
            raise FormatError("property pair without a key/value separator")
        result[key] = value
    return result


def encoded_size(*, topic: bytes, born_host: bytes, properties: bytes, body: bytes) -> int:
    return FIXED_END + 1 + len(topic) + 1 + len(born_host) + 4 + len(properties) + 4 + len(body)


def encode_record(
    *,
    physical_offset: int,
    queue_id: int,
    queue_offset: int,
    flags: int,
    born_timestamp_ms: int,
    store_timestamp_ms: int,
    reconsume_times: int,
    topic: bytes,
    born_host: bytes,
    properties: bytes,
    body: bytes,
) -> bytes:
    """Encode one record; the caller has validated names and sizes."""
    if len(topic) > 255 or len(born_host) > 255:
        raise FormatError("topic and born_host are limited to 255 bytes")
    payload = b"".join(
        (
            _FIXED.pack(
                physical_offset,
                queue_id,
                queue_offset,
                flags & 0xFFFF,
                born_timestamp_ms,
                store_timestamp_ms,
                reconsume_times,
            ),
            _U8.pack(len(topic)),
            topic,
            _U8.pack(len(born_host)),
            born_host,
            _U32.pack(len(properties)),
            properties,
            _U32.pack(len(body)),
            body,
        )
    )
    total = PREFIX_SIZE + len(payload)
    return _PREFIX.pack(total, MAGIC_MESSAGE_V1, zlib.crc32(payload)) + payload


# An unplaced record (``encode_unplaced``): a record whose position is not known yet. Its
# physical offset, queue offset, store time and CRC are zero until ``place_unplaced``
# fills them in; a born time of zero is filled with the store time.
_AT_PHYSICAL = PREFIX_SIZE  # i64
_AT_QUEUE_OFFSET = PREFIX_SIZE + 12  # i64, after the physical offset and the queue id
_AT_BORN = PREFIX_SIZE + 22  # i64, after the queue offset and the flags
_AT_STORED = PREFIX_SIZE + 30  # i64
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


def encode_unplaced(
    *,
    queue_id: int,
    flags: int,
    born_timestamp_ms: int,
    reconsume_times: int,
    topic: bytes,
    born_host: bytes,
    properties: bytes,
    body: bytes,
) -> bytes:
    """A record for ``queue_id`` whose position the store assigns (see ``place_unplaced``)."""
    return encode_record(
        physical_offset=0,
        queue_id=queue_id,
        queue_offset=0,
        flags=flags,
        born_timestamp_ms=born_timestamp_ms,
        store_timestamp_ms=0,
        reconsume_times=reconsume_times,
        topic=topic,
        born_host=born_host,
        properties=properties,
        body=body,
    )


@per_message
class Unplaced:
    """An unplaced record as read by :func:`parse_unplaced`: its bytes and what the store
    checks and indexes before it places it."""

    raw: bytes
    topic: str
    queue_id: int
    reconsume_times: int
    properties: dict[str, str]
    properties_size: int
    body_size: int


def parse_unplaced(raw: bytes) -> Unplaced:
    """Check the structure of an unplaced record (length, magic, every field inside it,
    UTF-8 text, well-formed properties) and read what the store needs; ``FormatError``
    says what is wrong. Position, store time and CRC are not checked: they are the
    store's to write."""
    _check_head(raw)
    (queue_id,) = _I32.unpack_from(raw, _AT_PHYSICAL + 8)
    (reconsume,) = _U32.unpack_from(raw, FIXED_END - 4)
    topic, _, properties, properties_size, body_at = _walk_to_body(raw)
    return Unplaced(
        raw, topic, queue_id, reconsume, properties, properties_size, len(raw) - body_at
    )


def with_queue_id(raw: bytes, queue_id: int) -> bytes:
    """The unplaced record ``raw`` for queue ``queue_id`` (the CRC is the store's to write)."""
    at = _AT_PHYSICAL + 8
    return b"".join((raw[:at], _I32.pack(queue_id), raw[at + _I32.size :]))


def unplaced_topic(raw: bytes) -> str:
    """The topic an unplaced (or placed) record names, without checking the rest."""
    try:
        return raw[FIXED_END + 1 : FIXED_END + 1 + raw[FIXED_END]].decode("utf-8")
    except (IndexError, UnicodeDecodeError) as exc:
        raise FormatError(f"malformed record topic: {exc}") from exc


def place_unplaced(
    raw: bytes, *, physical_offset: int, queue_offset: int, store_timestamp_ms: int
) -> bytearray:
    """The record ``raw`` (from ``encode_unplaced``) at its position: offsets and store
    time written in, a born time of zero replaced by the store time, the CRC computed."""
    record = bytearray(raw)
    _I64.pack_into(record, _AT_PHYSICAL, physical_offset)
    _I64.pack_into(record, _AT_QUEUE_OFFSET, queue_offset)
    _I64.pack_into(record, _AT_STORED, store_timestamp_ms)
    if not _I64.unpack_from(record, _AT_BORN)[0]:
        _I64.pack_into(record, _AT_BORN, store_timestamp_ms)
    _U32.pack_into(record, FILLER_MIN, zlib.crc32(memoryview(record)[PREFIX_SIZE:]))
    return record


def encode_filler(size: int) -> bytes:
    """An end-of-segment filler of exactly ``size`` bytes (``size >= FILLER_MIN``)."""
    return struct.pack(">IB", size, MAGIC_END_OF_SEGMENT) + bytes(size - FILLER_MIN)


@dataclass(frozen=True, slots=True)
class Probe:
    """What lies at a position: a record of ``size`` bytes, a filler, or the end."""

    kind: str  # "record" | "filler" | "end" | "bad"
    size: int
    reason: str = ""


def probe(head: bytes, *, position_in_segment: int, segment_bytes: int) -> Probe:
    """Classify the bytes at a position from its first ``PREFIX_SIZE`` bytes."""
    rest = segment_bytes - position_in_segment
    if rest < FILLER_MIN:
        return Probe("end", rest)
    if len(head) < FILLER_MIN or head[:FILLER_MIN] == bytes(FILLER_MIN):
        return Probe("end", 0)
    total, magic = struct.unpack_from(">IB", head)
    if magic == MAGIC_END_OF_SEGMENT:
        if total != rest:
            return Probe("bad", 0, f"filler claims {total} bytes but {rest} remain")
        return Probe("filler", total)
    if magic != MAGIC_MESSAGE_V1:
        return Probe("bad", 0, f"unknown magic 0x{magic:02x}")
    if total < MIN_RECORD_SIZE or total > rest:
        return Probe("bad", 0, f"record length {total} out of range (rest {rest})")
    return Probe("record", total)


def decode_record(raw: bytes, *, expected_physical_offset: int) -> Record:
    """Decode and verify a whole record read from ``expected_physical_offset``."""
    return Record(*decode_fields(raw, expected_physical_offset=expected_physical_offset))


RecordFields = tuple[int, int, int, int, int, int, int, int, str, str, dict[str, str], bytes]

_PHYSICAL = struct.Struct(">q")


def physical_offset_of(raw: bytes) -> int:
    """The physical offset a record says it was written at (unverified: the CRC that covers
    it is checked by :func:`decode_fields`); ``FormatError`` when ``raw`` is too short."""
    if len(raw) < MIN_RECORD_SIZE:
        raise FormatError(f"record truncated: {len(raw)} bytes")
    (physical,) = _PHYSICAL.unpack_from(raw, PREFIX_SIZE)
    return int(physical)


def decode_fields(raw: bytes, *, expected_physical_offset: int) -> RecordFields:
    """:func:`decode_record`'s checks and values, as a tuple in :class:`Record`'s field order.

    For bulk readers that want a few fields of many records without an object each.
    """
    total, crc = _check_head(raw)
    if zlib.crc32(memoryview(raw)[PREFIX_SIZE:]) != crc:
        raise FormatError("CRC mismatch")
    (physical, queue_id, queue_offset, flags, born, stored, reconsume) = _FIXED.unpack_from(
        raw, PREFIX_SIZE
    )
    if physical != expected_physical_offset:
        raise FormatError(
            f"record says physical offset {physical}, read at {expected_physical_offset}"
        )
    topic, born_host, properties, _, body_at = _walk_to_body(raw)
    return (
        physical,
        total,
        queue_id,
        queue_offset,
        flags,
        born,
        stored,
        reconsume,
        topic,
        born_host,
        properties,
        bytes(raw[body_at:]),
    )


def _check_head(raw: bytes) -> tuple[int, int]:
    """Length and magic of a record's prefix checked against ``raw``; (total, crc)."""
    if len(raw) < MIN_RECORD_SIZE:
        raise FormatError(f"record truncated: {len(raw)} bytes")
    total, magic, crc = _PREFIX.unpack_from(raw)
    if magic != MAGIC_MESSAGE_V1:
        raise FormatError(f"unknown magic 0x{magic:02x}")
    if total != len(raw):
        raise FormatError(f"record length {total} but {len(raw)} bytes available")
    return total, crc


def _walk_to_body(raw: bytes) -> tuple[str, str, dict[str, str], int, int]:
    """The variable fields after the fixed head, each checked to lie inside the record and
    to end exactly where the record does (texts UTF-8, properties well formed), without
    copying the body: (topic, born host, properties, their size, where the body starts)."""
    pos = FIXED_END
    try:
        topic_len = raw[pos]
        topic = raw[pos + 1 : pos + 1 + topic_len].decode("utf-8")
        pos += 1 + topic_len
        host_len = raw[pos]
        born_host = raw[pos + 1 : pos + 1 + host_len].decode("utf-8")
        pos += 1 + host_len
        (props_len,) = _U32.unpack_from(raw, pos)
        properties = decode_properties(raw[pos + 4 : pos + 4 + props_len])
        pos += 4 + props_len
        (body_len,) = _U32.unpack_from(raw, pos)
        pos += 4
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise FormatError(f"malformed record fields: {exc}") from exc
    if pos + body_len != len(raw):
        raise FormatError(f"record fields end at {pos + body_len}, length says {len(raw)}")
    return topic, born_host, properties, props_len, pos


# The fixed head of a record (through reconsume_times) as one numpy record.
_HEAD = np.dtype(
    [
        ("total", ">u4"), ("magic", "u1"), ("crc", ">u4"), ("physical", ">i8"),
        ("queue_id", ">i4"), ("queue_offset", ">i8"), ("flags", ">u2"), ("born", ">i8"),
        ("stored", ">i8"), ("reconsume", ">u4"),
    ]
)  # fmt: skip
assert _HEAD.itemsize == FIXED_END


@dataclass(frozen=True, slots=True)
class SpanColumns:
    """Fields of consecutive records decoded together (:func:`decode_span`), one list each."""

    queue_ids: list[int]
    queue_offsets: list[int]
    stored_ms: list[int]
    topics: list[str]
    properties: list[dict[str, str]]
    bodies: list[bytes]


def decode_span(
    span: bytes, extents: Sequence[tuple[int, int]], *, span_position: int
) -> SpanColumns | None:
    """The records at ``extents`` (``(physical_offset, size)``, inside ``span``, which was
    read at ``span_position``), decoded and verified as :func:`decode_fields` does, with
    the fixed fields of all of them read at once (numpy) instead of record by record.

    Returns None when any record fails a check: the caller then decodes record by record
    and reports the first failure exactly. Records with equal property bytes share one
    (read-only) properties dict.
    """
    count = len(extents)
    if count == 0:
        return SpanColumns([], [], [], [], [], [])
    buf = np.frombuffer(span, np.uint8)
    positions = np.fromiter((e[0] for e in extents), np.int64, count)
    sizes = np.fromiter((e[1] for e in extents), np.int64, count)
    starts = positions - span_position
    ends = starts + sizes
    if (starts < 0).any() or (ends > len(span)).any() or (sizes < MIN_RECORD_SIZE).any():
        return None
    head = buf[starts[:, None] + np.arange(FIXED_END)].view(_HEAD).reshape(count)
    if not (
        (head["total"] == sizes).all()
        and (head["magic"] == MAGIC_MESSAGE_V1).all()
        and (head["physical"] == positions).all()
    ):
        return None
    topic_at = starts + FIXED_END
    topic_len = buf[topic_at].astype(np.int64)
    host_at = topic_at + 1 + topic_len
    if (host_at >= ends).any():
        return None
    props_at = host_at + 1 + buf[host_at].astype(np.int64)
    if (props_at + 4 > ends).any():
        return None
    props_len = _be_u32(buf, props_at)
    body_at = props_at + 4 + props_len
    if (body_at + 4 > ends).any():
        return None
    body_len = _be_u32(buf, body_at)
    if ((body_at + 4 + body_len) != ends).any():
        return None
    view = memoryview(span)
    crc32 = zlib.crc32
    crcs = head["crc"].tolist()
    for first, end, crc in zip((starts + PREFIX_SIZE).tolist(), ends.tolist(), crcs, strict=True):
        if crc32(view[first:end]) != crc:
            return None
    topics = _texts(span, (topic_at + 1).tolist(), topic_len.tolist())
    hosts = _texts(span, (host_at + 1).tolist(), buf[host_at].tolist())
    if topics is None or hosts is None:
        return None
    known: dict[bytes, dict[str, str]] = {}
    properties = []
    for first, length in zip((props_at + 4).tolist(), props_len.tolist(), strict=True):
        raw = span[first : first + length]
        decoded = known.get(raw)
        if decoded is None:
            try:
                decoded = known[raw] = decode_properties(raw)
            except (FormatError, UnicodeDecodeError):
                return None
        properties.append(decoded)
    bodies = [
        span[first : first + length]
        for first, length in zip((body_at + 4).tolist(), body_len.tolist(), strict=True)
    ]
    return SpanColumns(
        head["queue_id"].tolist(),
        head["queue_offset"].tolist(),
        head["stored"].tolist(),
        topics,
        properties,
        bodies,
    )


def _texts(span: bytes, firsts: list[int], lengths: list[int]) -> list[str] | None:
    """UTF-8 texts at ``firsts``, decoded in one call (joined by NUL, an ASCII byte, the
    whole is valid UTF-8 exactly when every piece is); None if one is not, or holds NUL."""
    pieces = [span[first : first + length] for first, length in zip(firsts, lengths, strict=True)]
    try:
        texts = b"\x00".join(pieces).decode("utf-8").split("\x00")
    except UnicodeDecodeError:
        return None
    return texts if len(texts) == len(pieces) else None


def _be_u32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    word = buf[at[:, None] + np.arange(4)].astype(np.int64)
    return (word[:, 0] << 24) | (word[:, 1] << 16) | (word[:, 2] << 8) | word[:, 3]


def encode_cq_entry(physical_offset: int, size: int, tag_hash: int) -> bytes:
    return CQ_ENTRY.pack(physical_offset, size, tag_hash)


def decode_cq_entry(raw: bytes, at: int = 0) -> tuple[int, int, int]:
    """``(physical_offset, size, tag_hash)``; ``size == 0`` marks a hole."""
    physical, size, hashed = CQ_ENTRY.unpack_from(raw, at)
    return physical, size, hashed
