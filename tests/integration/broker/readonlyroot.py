"""Run Python code as if the root filesystem were read-only: a driver for subprocess tests.

Why: broker pods (and the operator's) run with ``readOnlyRootFilesystem`` and
``HOME=/nonexistent``; only their volumes (``/data``, an emptyDir on ``/tmp``) are
writable. The tests run as whatever user the machine gives them (often root, which
ignores permission bits), so the read-only root is enforced here instead, with an
audit hook (PEP 578): every file-system write outside ``--writable`` directories —
a write-mode ``open``, ``mkdir``, ``rename``, a Unix socket ``bind``... — is refused
with ``EROFS``, as the kernel would, and reported on stderr as ``REFUSED WRITE``.

    python readonlyroot.py [--writable DIR]... [--import MODULE]... [--report FILE]
                           [-- SCRIPT ARG...]

1. the hook is installed and a sentinel handler put on the root logger;
2. every ``--import`` module is imported;
3. ``--report`` (a path under ``--writable``) receives what the imports did to logging
   (JSON: the root logger's handlers, whether the sentinel was closed, the handlers of
   the official client's ``rocketmq-python-client`` logger);
4. the ``SCRIPT`` (a console script such as ``.venv/bin/popbroker``) runs as ``__main__``
   with ``ARG...`` as its arguments; its exit status is this process's.

Run with ``PYTHONDONTWRITEBYTECODE=1`` (a real image has its bytecode compiled already).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import logging
import os
import runpy
import sys
from pathlib import Path
from typing import Any

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
PATH_WRITES = {  # audit event -> index of the path argument
    "os.mkdir": 0,
    "os.remove": 0,
    "os.rmdir": 0,
    "os.rename": 1,
    "os.link": 1,
    "os.symlink": 1,
    "os.truncate": 0,
    "os.chmod": 0,
    "os.chown": 0,
    "os.utime": 0,
    "os.mkfifo": 0,
    "os.mknod": 0,
    "shutil.copyfile": 1,
    "shutil.rmtree": 0,
}
ROCKETMQ_LOGGER = "rocketmq-python-client"


class Sentinel(logging.Handler):
    """A handler on the root logger that notices being closed (``dictConfig`` closes all)."""

    closed = False

    def emit(self, record: logging.LogRecord) -> None:
        pass

    def close(self) -> None:
        self.closed = True
        super().close()


def install_read_only_root(writable: list[Path]) -> None:
    roots = [os.path.realpath(p) for p in writable]

    def allowed(path: Any) -> bool:
        if isinstance(path, int):  # an open descriptor; the write was judged when it opened
            return True
        real = os.path.realpath(os.fsdecode(path))
        return real == os.devnull or any(
            real == root or real.startswith(root + os.sep) for root in roots
        )

    def refuse(event: str, path: Any) -> None:
        sys.stderr.write(f"REFUSED WRITE: {event} {path!r}\n")
        raise OSError(errno.EROFS, "Read-only file system (readonlyroot.py)", str(path))

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = args
            writes = bool(flags & WRITE_FLAGS) or any(c in str(mode or "") for c in "wax+")
            if path is not None and writes and not allowed(path):
                refuse(event, path)
        elif event in PATH_WRITES:
            path = args[PATH_WRITES[event]]
            if not allowed(path):
                refuse(event, path)
        elif event == "socket.bind":
            address = args[1]
            if isinstance(address, str | bytes) and address and not allowed(address):
                refuse(event, address)

    sys.addaudithook(hook)


def main() -> int:
    argv = sys.argv[1:]
    script: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, script = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser()
    parser.add_argument("--writable", type=Path, action="append", default=[])
    parser.add_argument("--import", dest="imports", action="append", default=[])
    parser.add_argument("--report", type=Path)
    args = parser.parse_args(argv)

    install_read_only_root(args.writable)
    sentinel = Sentinel()
    logging.getLogger().addHandler(sentinel)
    for module in args.imports:
        importlib.import_module(module)
    if args.report is not None:
        args.report.write_text(
            json.dumps(
                {
                    "root_handlers": [type(h).__name__ for h in logging.getLogger().handlers],
                    "sentinel_closed": sentinel.closed,
                    "rocketmq_handlers": [
                        type(h).__name__ for h in logging.getLogger(ROCKETMQ_LOGGER).handlers
                    ],
                    "imported": sorted(m for m in sys.modules if m.split(".")[0] == "rocketmq"),
                }
            )
        )
    if not script:
        return 0
    sys.argv = script
    try:
        runpy.run_path(script[0], run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
