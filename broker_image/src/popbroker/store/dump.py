"""Print a store's files human-readably: ``python -m popbroker.store.dump PATH``.

``PATH`` may be a data directory (summary of every segment and queue), a
commit-log segment file (every record), or a consume-queue file (every entry).
Read-only: it never takes the store's lock and never repairs anything; damage is
printed where it is found, with the offset, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from popbroker.store import flushmark
from popbroker.store import format as fmt

BODY_PREVIEW = 40


def _preview(body: bytes) -> str:
    text = body[:BODY_PREVIEW]
    shown = text.decode("utf-8", errors="replace").replace("\n", "\\n")
    return shown + ("..." if len(body) > BODY_PREVIEW else "")


def dump_segment(path: Path, out: TextIO, *, segment_bytes: int | None = None) -> int:
    """Every record of one commit-log segment; returns the number of problems."""
    base = int(path.name)
    data = path.read_bytes()
    size = segment_bytes or max(len(data), 1)
    position, problems = 0, 0
    print(f"segment {path.name}: {len(data)} bytes", file=out)
    while position < len(data):
        head = data[position : position + fmt.PREFIX_SIZE]
        found = fmt.probe(head, position_in_segment=position, segment_bytes=max(size, len(data)))
        if found.kind == "end":
            print(f"  @{base + position}: end of data", file=out)
            break
        if found.kind == "filler":
            print(f"  @{base + position}: end-of-segment filler, {found.size} bytes", file=out)
            break
        if found.kind == "bad":
            print(f"  @{base + position}: DAMAGED: {found.reason}", file=out)
            return problems + 1
        try:
            record = fmt.decode_record(
                data[position : position + found.size], expected_physical_offset=base + position
            )
        except fmt.FormatError as exc:
            print(f"  @{base + position}: DAMAGED: {exc}", file=out)
            return problems + 1
        props = " ".join(f"{k}={v}" for k, v in sorted(record.properties.items()))
        print(
            f"  @{record.physical_offset} size={record.total_size} {record.topic}/{record.queue_id}"
            f"#{record.queue_offset} stored={record.store_timestamp_ms} "
            f"reconsume={record.reconsume_times} [{props}] body={_preview(record.body)!r}",
            file=out,
        )
        position += found.size
    return problems


def dump_queue_file(path: Path, out: TextIO) -> int:
    base = int(path.name) // fmt.CQ_ENTRY_SIZE
    data = path.read_bytes()
    print(f"consume queue file {path} ({len(data) // fmt.CQ_ENTRY_SIZE} entries)", file=out)
    problems = 0
    for i in range(len(data) // fmt.CQ_ENTRY_SIZE):
        physical, size, hashed = fmt.decode_cq_entry(data, i * fmt.CQ_ENTRY_SIZE)
        note = "  HOLE" if size == 0 else ""
        problems += size == 0
        print(f"  #{base + i} physical={physical} size={size} tag_hash={hashed}{note}", file=out)
    if len(data) % fmt.CQ_ENTRY_SIZE:
        print(f"  torn tail of {len(data) % fmt.CQ_ENTRY_SIZE} bytes", file=out)
        problems += 1
    return problems


def dump_directory(root: Path, out: TextIO, *, records: bool) -> int:
    mark = flushmark.read(root / "checkpoint")
    print(f"store {root}", file=out)
    print(
        f"checkpoint: flushed={mark.flushed_physical_offset} "
        f"dispatched={mark.dispatched_physical_offset}",
        file=out,
    )
    problems = 0
    segments = sorted((root / "commitlog").glob("0" * 1 + "*"))
    print(f"commit log: {len(segments)} segment(s)", file=out)
    for seg in segments:
        if records:
            problems += dump_segment(seg, out)
        else:
            print(f"  {seg.name}: {seg.stat().st_size} bytes", file=out)
    cq_root = root / "consumequeue"
    print("consume queues:", file=out)
    for queue_dir in sorted(p for p in cq_root.glob("*/*") if p.is_dir()):
        files = sorted(queue_dir.iterdir())
        entries = sum(f.stat().st_size for f in files) // fmt.CQ_ENTRY_SIZE
        first = int(files[0].name) // fmt.CQ_ENTRY_SIZE if files else 0
        print(
            f"  {queue_dir.parent.name}/{queue_dir.name}: files={len(files)} "
            f"first={first} entries={entries}",
            file=out,
        )
    for name in ("metadata.json", "offsets.json"):
        path = root / "config" / name
        state = f"{path.stat().st_size} bytes" if path.exists() else "missing"
        print(f"config/{name}: {state}", file=out)
    return problems


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="python -m popbroker.store.dump", description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--records", action="store_true", help="with a directory: every record")
    args = parser.parse_args(argv)
    path: Path = args.path
    if path.is_dir():
        problems = dump_directory(path, out, records=args.records)
    elif path.parent.name == "commitlog":
        problems = dump_segment(path, out)
    elif path.parent.parent.parent.name == "consumequeue":
        problems = dump_queue_file(path, out)
    else:
        print(f"{path}: not a store directory, segment or consume-queue file", file=sys.stderr)
        return 2
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
