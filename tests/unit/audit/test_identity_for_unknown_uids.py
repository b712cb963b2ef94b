"""popfleet_audit.identity: a passwd entry for the JVM under a UID the image does not know."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from popfleet_audit import identity

UNKNOWN_UID = 54_321  # no such user on the test machine (asserted below)


def test_a_known_uid_changes_nothing(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    assert not identity.ensure_user_entry(env, uid=os.getuid(), directory=tmp_path)
    assert env == {}
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_uid_gets_an_entry_in_the_temporary_directory(tmp_path: Path) -> None:
    assert not identity.has_entry(UNKNOWN_UID)
    env = {"LD_PRELOAD": "/lib/other.so"}
    made = identity.ensure_user_entry(
        env, uid=UNKNOWN_UID, gid=UNKNOWN_UID, directory=tmp_path, library="/lib/nss.so"
    )
    assert made
    assert env["LD_PRELOAD"] == "/lib/nss.so /lib/other.so"
    passwd = Path(env["NSS_WRAPPER_PASSWD"]).read_text()
    assert passwd.startswith(f"popfleet:x:{UNKNOWN_UID}:{UNKNOWN_UID}:")
    assert f":{tmp_path}:" in passwd  # Java's user.home: writable (an emptyDir in pods)
    assert Path(env["NSS_WRAPPER_GROUP"]).read_text() == f"popfleet:x:{UNKNOWN_UID}:\n"
    assert Path(env["NSS_WRAPPER_PASSWD"]).parent == tmp_path


def test_an_entry_already_provided_is_kept(tmp_path: Path) -> None:
    env = {"NSS_WRAPPER_PASSWD": "/elsewhere"}
    assert not identity.ensure_user_entry(env, uid=UNKNOWN_UID, directory=tmp_path)
    assert env == {"NSS_WRAPPER_PASSWD": "/elsewhere"}


def test_without_the_library_the_error_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(identity, "nss_wrapper_library", lambda: None)
    with pytest.raises(identity.IdentityError, match=r"libnss_wrapper\.so is not installed"):
        identity.ensure_user_entry({}, uid=UNKNOWN_UID, directory=tmp_path)
