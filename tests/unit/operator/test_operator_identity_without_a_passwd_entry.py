"""The operator names itself for kopf's peering without asking the OS for its user name."""

from __future__ import annotations

import os
import pwd
import socket

import kopf
import pytest

from popfleet_operator import __main__ as entry


def test_identity_needs_no_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_user(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_such_user)
    assert entry.identity() == f"{socket.gethostname()}/{os.getpid()}"


def test_main_passes_the_identity_to_kopf(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    monkeypatch.setattr(kopf, "run", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))
    assert entry.main() == 0
    assert seen["identity"] == entry.identity()
