"""A passwd entry for the JVM when the pod runs under a UID the image does not know.

Why: Spark's driver logs in through Hadoop's ``UserGroupInformation``, which asks the OS for
the current user's name; under a UID with no ``/etc/passwd`` entry (a cluster that assigns
random UIDs, e.g. OpenShift's restricted SCC) the JVM gets none and the session fails with
"Invalid UID, could not determine effective user", and Java's ``user.home`` is ``?``. The
official Spark image fixes that by appending to ``/etc/passwd``, which a read-only root
filesystem forbids. Here the entry goes to a file in the temporary directory (an emptyDir in
every deployment) and ``nss_wrapper`` (Debian/Ubuntu ``libnss-wrapper``, installed in the
audit image) makes the JVM, which Spark starts as a child of this process, see it.

Nothing changes when the UID already has an entry (the image's own user 185).
"""

from __future__ import annotations

import ctypes.util
import os
import pwd
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


class IdentityError(RuntimeError):
    """The UID has no passwd entry and none can be provided; the message says what is missing."""


def nss_wrapper_library() -> str | None:
    """Path of ``libnss_wrapper.so``, if installed."""
    for directory in LIBRARY_DIRS:
        candidate = Path(directory) / "libnss_wrapper.so"
        if candidate.exists():
            return str(candidate)
    found = ctypes.util.find_library("nss_wrapper")
    return found


def has_entry(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def ensure_user_entry(
    env: MutableMapping[str, str] = os.environ,
    *,
    uid: int | None = None,
    gid: int | None = None,
    directory: Path | None = None,
    library: str | None = None,
) -> bool:
    """Give child processes a passwd entry for this UID; False when one already exists."""
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    if has_entry(uid) or "NSS_WRAPPER_PASSWD" in env:
        return False
    library = library or nss_wrapper_library()
    if library is None:
        raise IdentityError(
            f"UID {uid} has no passwd entry and libnss_wrapper.so is not installed: "
            "Spark cannot determine the current user"
        )
    home = directory or Path(tempfile.gettempdir())
    passwd = home / "popfleet-passwd"
    group = home / "popfleet-group"
    passwd.write_text(f"popfleet:x:{uid}:{gid}:popfleet audit:{home}:/usr/sbin/nologin\n")
    group.write_text(f"popfleet:x:{gid}:\n")
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{library} {preload}".strip()
    env["NSS_WRAPPER_PASSWD"] = str(passwd)
    env["NSS_WRAPPER_GROUP"] = str(group)
    return True
