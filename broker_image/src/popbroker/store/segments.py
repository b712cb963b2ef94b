"""A logical byte stream stored as fixed-size segment files.

Both the commit log and every consume queue are such streams. A segment file is
named after the stream position of its first byte, zero-padded to 20 digits
(``00000000000067108864``), so ``ls`` order is stream order and a position maps
to a file by arithmetic. Files grow as they are written (no preallocation); the
stream's write position is the end of the last file.

Invariants:

1. Positions only grow, except through ``truncate`` (recovery, failed batches).
2. Files before the first one have been deleted by retention: ``min_position`` is
   the first file's base.
3. ``flush`` fsyncs every file written since the last flush, so a caller that
   flushed up to ``p`` knows every byte below ``p`` is durable.

Writes go through ``os.pwrite`` on a cached descriptor; reads through
``os.pread``. Disk-full errors (ENOSPC, EDQUOT, EFBIG) undo the partial write and
surface as ``StoreFull``; the stream stays readable and accepts writes again when
space returns.

Callers: ``popbroker.store.commitlog`` and ``popbroker.store.consumequeue``; they
serialise writes under their own lock.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from popbroker.store.errors import CorruptStore, StoreFull

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
NAME_WIDTH = 20


def segment_name(base: int) -> str:
    return f"{base:0{NAME_WIDTH}d}"


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentedFile:
    """One logical stream in ``directory``, in segments of ``segment_bytes`` bytes."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._fds: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._bases: list[int] = []
        for entry in sorted(directory.iterdir()):
            if entry.name.isdigit() and len(entry.name) == NAME_WIDTH:
                base = int(entry.name)
                if base % segment_bytes:
                    raise CorruptStore(
                        f"{entry}: name is not a multiple of the segment size {segment_bytes}"
                    )
                self._bases.append(base)
        for previous, current in zip(self._bases, self._bases[1:], strict=False):
            if current != previous + segment_bytes:
                raise CorruptStore(
                    f"{directory}: segment {segment_name(previous + segment_bytes)} is missing"
                )
        self._write_position = self._compute_end()

    # -- positions ---------------------------------------------------------

    def _compute_end(self) -> int:
        if not self._bases:
            return 0
        last = self._bases[-1]
        size = self._path(last).stat().st_size
        if size > self.segment_bytes:
            raise CorruptStore(f"{self._path(last)} is larger than the segment size")
        return last + size

    @property
    def min_position(self) -> int:
        return self._bases[0] if self._bases else self._write_position

    @property
    def write_position(self) -> int:
        return self._write_position

    @property
    def bases(self) -> tuple[int, ...]:
        return tuple(self._bases)

    def file_end(self, base: int) -> int:
        """Stream position of the end of the file starting at ``base``."""
        if base == self._bases[-1]:
            return self._write_position
        return base + self._path(base).stat().st_size

    def _path(self, base: int) -> Path:
        return self.directory / segment_name(base)

    def _fd(self, base: int) -> int:
        fd = self._fds.get(base)
        if fd is None:
            fd = os.open(self._path(base), os.O_RDWR | os.O_CREAT, 0o644)
            self._fds[base] = fd
        return fd

    # -- writing -----------------------------------------------------------

    def start_position(self, position: int) -> None:
        """Place an empty stream at ``position`` (a consume queue whose head was deleted)."""
        if self._bases:
            raise ValueError("start_position on a non-empty stream")
        self._write_position = position

    def append(self, data: bytes) -> int:
        """Write ``data`` at the write position; it must fit in the current segment."""
        position = self._write_position
        base = position - position % self.segment_bytes
        if len(data) > self.segment_bytes - (position - base):
            raise ValueError("write would cross a segment boundary")
        created = False
        if not self._bases or self._bases[-1] != base:
            created = True
        try:
            fd = self._fd(base)
            if created:
                self._bases.append(base)
            written = os.pwrite(fd, data, position - base)
            if written != len(data):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as exc:
            self._undo(position, base, created)
            if exc.errno in _DISK_FULL:
                raise StoreFull(f"disk full writing {self._path(base)}: {exc.strerror}") from exc
            raise
        self._dirty.add(base)
        self._write_position = position + len(data)
        return position

    def _undo(self, position: int, base: int, created: bool) -> None:
        try:
            if base in self._fds:
                os.ftruncate(self._fds[base], position - base)
        except OSError:
            pass  # the file may be gone with the failure; recovery truncates it anyway
        if created and self._bases and self._bases[-1] == base:
            self._bases.pop()
            fd = self._fds.pop(base, None)
            if fd is not None:
                os.close(fd)
            self._path(base).unlink(missing_ok=True)

    def truncate(self, position: int) -> None:
        """Drop every byte at or after ``position``."""
        if position >= self._write_position:
            return
        for base in list(reversed(self._bases)):
            if base >= position and base != position - position % self.segment_bytes:
                self._close(base)
                self._path(base).unlink(missing_ok=True)
                self._bases.remove(base)
        base = position - position % self.segment_bytes
        if self._bases and self._bases[-1] == base:
            os.ftruncate(self._fd(base), position - base)
            self._dirty.add(base)
        self._write_position = position
        fsync_directory(self.directory)

    # -- reading -----------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        """Read up to ``size`` bytes at ``position`` without crossing a segment end."""
        base = position - position % self.segment_bytes
        if base not in self._fds and base not in self._bases:
            return b""
        end = min(position + size, base + self.segment_bytes, self._write_position)
        if end <= position:
            return b""
        return os.pread(self._fd(base), end - position, position - base)

    # -- durability and retention -------------------------------------------

    def take_dirty(self) -> list[int]:
        """Duplicated descriptors of the files written since the last call.

        The caller fsyncs them outside its lock (``sync_and_close``), so that group
        commit does not block writers while the disk works.
        """
        dirty, self._dirty = self._dirty, set()
        return [os.dup(self._fds[base]) for base in sorted(dirty) if base in self._fds]

    @staticmethod
    def sync_and_close(fds: list[int]) -> None:
        try:
            for fd in fds:
                os.fdatasync(fd)
        finally:
            for fd in fds:
                os.close(fd)

    def sync_from(self, position: int) -> None:
        """fsync every file holding bytes at or after ``position``.

        Recovery calls it for the bytes it verified: after a process crash they may
        sit only in the page cache, and the store is about to count them as flushed.
        """
        for base in self._bases:
            if base + self.segment_bytes > position:
                os.fdatasync(self._fd(base))

    def flush(self) -> None:
        """fsync every file written since the last flush."""
        dirty, self._dirty = self._dirty, set()
        for base in sorted(dirty):
            fd = self._fds.get(base)
            if fd is not None:
                os.fdatasync(fd)
        if dirty:
            fsync_directory(self.directory)

    def delete_before(self, position: int) -> list[int]:
        """Delete whole files that end at or before ``position``; never the last file."""
        removed = []
        while len(self._bases) > 1 and self._bases[0] + self.segment_bytes <= position:
            base = self._bases.pop(0)
            self._close(base)
            self._path(base).unlink(missing_ok=True)
            removed.append(base)
        if removed:
            fsync_directory(self.directory)
        return removed

    def delete_all(self) -> None:
        for base in list(self._bases):
            self._close(base)
            self._path(base).unlink(missing_ok=True)
        self._bases.clear()
        self._write_position = 0

    def _close(self, base: int) -> None:
        fd = self._fds.pop(base, None)
        self._dirty.discard(base)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for base in list(self._fds):
            self._close(base)
