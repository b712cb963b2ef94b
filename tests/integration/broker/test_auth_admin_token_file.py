"""``popbroker store --admin-token-file``: the role's admin port with the token read from a file.

The token logic itself is tested in-process (tests/integration/admin); this
checks the role's wiring: the file's content (stripped) is the token, a call
without it or with another is refused UNAUTHENTICATED, the right one is
served, and an empty file stops the role with a clear error (never an open
admin port).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from popfleet_api import errors
from popfleet_api.client import BrokerAdmin

TOKEN = "file-token-42"
START_TIMEOUT_S = 30.0


def _store(tmp_path: Path, token_file: Path, *, stderr: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "popbroker.cli", "store",
         "--data-dir", str(tmp_path / "data"), "--socket", str(tmp_path / "store.sock"),
         "--admin-listen", "127.0.0.1:0", "--admin-port-file", str(tmp_path / "admin-port"),
         "--admin-token-file", str(token_file)],
        stdout=subprocess.DEVNULL, stderr=stderr,
    )  # fmt: skip


@pytest.fixture
def admin_target(tmp_path: Path) -> Iterator[str]:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")  # a Secret's value often ends with a newline
    proc = _store(tmp_path, token_file, stderr=subprocess.DEVNULL)
    port_file = tmp_path / "admin-port"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while not port_file.exists():
            assert proc.poll() is None, "store role exited"
            assert time.monotonic() < deadline, "admin port not written"
            time.sleep(0.02)
        yield f"127.0.0.1:{port_file.read_text().strip()}"
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


async def test_missing_wrong_and_right_token(admin_target: str) -> None:
    async with BrokerAdmin(admin_target, timeout_s=10.0) as anonymous:
        with pytest.raises(errors.Unauthenticated) as missing:
            await anonymous.info()
        assert missing.value.reason == "TOKEN_REQUIRED"
    async with BrokerAdmin(admin_target, token=f"{TOKEN}x", timeout_s=10.0) as wrong:
        with pytest.raises(errors.Unauthenticated) as refused:
            await wrong.info()
        assert refused.value.reason == "TOKEN_REFUSED"
    async with BrokerAdmin(admin_target, token=TOKEN, timeout_s=10.0) as trusted:
        assert (await trusted.info()).ready


def test_an_empty_token_file_stops_the_role(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("\n")
    proc = _store(tmp_path, token_file, stderr=subprocess.PIPE)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert b"is empty" in stderr
    assert not (tmp_path / "admin-port").exists()
