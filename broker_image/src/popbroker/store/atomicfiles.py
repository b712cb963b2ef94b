"""Small JSON state files written atomically, with the previous version kept.

``write_json(path, value)``:

1. write ``path.tmp`` and fsync it;
2. hard-link the current ``path`` (if any) to ``path.bak``, replacing the old backup;
3. rename ``path.tmp`` over ``path`` and fsync the directory.

A crash at any step leaves either the old or the new file at ``path``, and
``path.bak`` one version behind. ``read_json`` returns the main file, falls back to
the backup when the main file is missing or unreadable, and says which it used, so
the caller can treat a restored config as a new config epoch.
"""

from __future__ import annotations

import enum
import json
import logging
import os
from pathlib import Path
from typing import Any

from popbroker.store.segments import fsync_directory

log = logging.getLogger(__name__)


class Source(enum.Enum):
    MAIN = "main"
    BACKUP = "backup"
    NONE = "none"


def write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError:
        tmp.unlink(missing_ok=True)  # a half-written temp file only takes space
        raise
    finally:
        os.close(fd)
    backup = path.with_name(path.name + ".bak")
    if path.exists():
        backup.unlink(missing_ok=True)
        os.link(path, backup)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def read_json(path: Path) -> tuple[Any, Source]:
    """The content of ``path`` (or its backup) and where it came from."""
    for candidate, source in (
        (path, Source.MAIN),
        (path.with_name(path.name + ".bak"), Source.BACKUP),
    ):
        try:
            return json.loads(candidate.read_bytes()), source
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            log.warning("state file %s unreadable (%s); trying its backup", candidate, exc)
    return None, Source.NONE
