"""Recovery of a ``LocalStore`` when it opens: config, commit log, consume queues, offsets.

``LocalStore.open`` takes the directory lock (a second store on the same
directory is refused), then ``LocalStore._recover`` runs these steps in order:

1. load the config (:func:`load_metadata`); a missing or unreadable main file
   falls back to its backup, and an empty or restored config gets a new config
   epoch; the revive topic is ensured;
2. verify the commit-log tail from the flush mark (``CommitLog.recover``);
3. load consume queues, cut entries that point past the recovered log end
   (:func:`load_consume_queues`);
4. re-dispatch records from the flush mark (:func:`redispatch`); a queue with a
   gap (its file was truncated or lost), or one shorter than ``queues.json``
   last recorded (:func:`queues_behind_record`), is rebuilt from the whole
   commit log (:func:`rebuild_queues`);
5. advance queue minimums to the log's minimum; load committed offsets
   (:func:`load_offsets`); write a fresh flush mark.

The functions take the parts they work on (the commit log, the consume-queue
table, the store's ``open_cq``), not the store, so this module does not import
``local.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from popbroker.store import atomicfiles, filters, names
from popbroker.store import format as fmt
from popbroker.store.api import PROPERTY_TAGS
from popbroker.store.commitlog import CommitLog
from popbroker.store.consumequeue import ConsumeQueue, Entry
from popbroker.store.errors import CorruptStore, InvalidArgument
from popbroker.store.metadata import Metadata
from popbroker.store.offsets import OffsetTable
from popbroker.store.settings import StoreSettings

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]
OpenQueue = Callable[[str, int], ConsumeQueue]


def load_metadata(data_dir: Path, *, settings: StoreSettings) -> Metadata:
    """Step 1: the config, from its main file, else its backup, else empty."""
    config_dir = data_dir / "config"
    raw, source = atomicfiles.read_json(config_dir / "metadata.json")
    has_data = any((data_dir / "commitlog").glob("0*"))
    if source is atomicfiles.Source.MAIN:
        metadata = _parse_metadata(raw, config_dir / "metadata.json")
    elif source is atomicfiles.Source.BACKUP:
        metadata = _parse_metadata(raw, config_dir / "metadata.json.bak").with_new_epoch()
        log.warning("config restored from its backup; new config epoch %s", metadata.epoch)
    else:
        metadata = Metadata()
        if has_data:
            log.warning(
                "config file missing although the commit log holds data; starting with an "
                "empty config (epoch %s) - the operator re-applies what is declared",
                metadata.epoch,
            )
    revive = names.revive_topic(settings.cluster)
    metadata.ensure_system_topic(revive, settings.revive_queue_num)
    return metadata


def _parse_metadata(raw: object, path: Path) -> Metadata:
    """A config file that parses as JSON but not as a config is refused, not overwritten."""
    try:
        return Metadata.from_json(raw)
    except InvalidArgument as exc:
        raise CorruptStore(
            f"{path}: {exc}; refusing to start rather than overwrite "
            "it. Fix or move the file away (the store then uses the backup, or starts "
            "with an empty config and a new config epoch)."
        ) from exc


def load_consume_queues(data_dir: Path, *, end: int, open_cq: OpenQueue) -> None:
    """Step 3: open every queue directory; cut entries past ``end`` (the log end) or holes."""
    root = data_dir / "consumequeue"
    root.mkdir(exist_ok=True)
    for topic_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for queue_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir()):
            if not queue_dir.name.isdigit():
                continue
            cq = open_cq(topic_dir.name, int(queue_dir.name))
            # cut entries that point past the recovered log end, or holes
            while (last := cq.last()) is not None and (
                last.size == 0 or last.physical_offset + last.size > end
            ):
                cq.truncate_to(last.queue_offset)


def redispatch(
    commitlog: CommitLog, start: int, *, open_cq: OpenQueue, segment_bytes: int
) -> set[QueueKey]:
    """Step 4: index records from ``start``; return queues found with a gap."""
    start = max(start - start % segment_bytes, commitlog.min_offset)
    damaged: set[QueueKey] = set()
    for record in commitlog.scan(start):
        key = (record.topic, record.queue_id)
        if key in damaged:
            continue
        cq = open_cq(*key)
        entry = entry_of(record)
        if record.queue_offset < cq.max_queue_offset:
            if record.queue_offset < cq.min_queue_offset:
                continue
            existing = cq.entries(record.queue_offset, 1)
            if existing and existing[0].physical_offset == record.physical_offset:
                continue
            log.warning("consume queue %s disagrees with the commit log; re-indexing", key)
            cq.truncate_to(record.queue_offset)
        if record.queue_offset > cq.max_queue_offset:
            if cq.max_queue_offset == 0 and not cq.file.bases and start <= commitlog.min_offset:
                # head lost with retention; only provable when the scan began at the
                # log's first record (a deleted queue directory is rebuilt instead)
                cq.start_at(record.queue_offset)
            else:
                damaged.add(key)
                continue
        cq.append(entry)
    return damaged


def queues_behind_record(config_dir: Path, cqs: dict[QueueKey, ConsumeQueue]) -> set[QueueKey]:
    """Step 4: queues shorter than ``queues.json`` last recorded (a lost queue file)."""
    raw, _source = atomicfiles.read_json(config_dir / "queues.json")
    if not isinstance(raw, dict):
        return set()
    behind: set[QueueKey] = set()
    for row in raw.get("queues", []):
        try:
            key, known_max = (str(row[0]), int(row[1])), int(row[2])
        except (TypeError, ValueError, IndexError):
            continue
        cq = cqs.get(key)
        if cq is None or cq.max_queue_offset < known_max:
            behind.add(key)
    return behind


def rebuild_queues(
    commitlog: CommitLog,
    damaged: set[QueueKey],
    *,
    cqs: dict[QueueKey, ConsumeQueue],
    open_cq: OpenQueue,
) -> None:
    """Step 4: destroy the ``damaged`` queues and index them again from the whole log."""
    log.warning("rebuilding consume queues %s from the whole commit log", sorted(damaged))
    for key in damaged:
        cq = cqs.pop(key, None)
        if cq is not None:
            cq.destroy()
    for record in commitlog.scan(commitlog.min_offset):
        key = (record.topic, record.queue_id)
        if key not in damaged:
            continue
        cq = open_cq(*key)
        if not cq.file.bases and cq.max_queue_offset == 0:
            cq.start_at(record.queue_offset)
        if record.queue_offset != cq.max_queue_offset:
            raise CorruptStore(
                f"commit log holds queue offsets of {key} out of order "
                f"({record.queue_offset} after {cq.max_queue_offset - 1})"
            )
        cq.append(entry_of(record))


def load_offsets(config_dir: Path) -> OffsetTable | None:
    """Step 5: the committed offsets (None when never written)."""
    raw, _source = atomicfiles.read_json(config_dir / "offsets.json")
    return OffsetTable.from_json(raw) if raw is not None else None


def entry_of(record: fmt.Record) -> Entry:
    """The consume-queue entry that indexes ``record``."""
    tag = record.properties.get(PROPERTY_TAGS, "")
    return Entry(
        record.queue_offset, record.physical_offset, record.total_size, filters.tag_hash(tag)
    )
