"""A failed fsync stops the store from accepting writes (fail-stop), and nothing is lost.

The disk cannot be made to fail fsync here (no device-mapper), so the failure is
injected at our own seam, ``SegmentedFile.sync_and_close``; everything around it
is the real store on real files.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from popbroker.store.api import FlushMode, MessageToAppend, ReadStatus, TopicConfig
from popbroker.store.errors import StoreError
from popbroker.store.local import LocalStore
from popbroker.store.segments import SegmentedFile
from tests.storesettings import small_settings


async def test_sync_append_fails_and_the_store_refuses_writes_after_an_fsync_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore.open(tmp_path / "d", small_settings(flush_mode=FlushMode.SYNC))
    await store.put_topic(TopicConfig("t", 1, 1))
    (kept,) = await store.append([MessageToAppend("t", 0, b"durable")])

    def failing_sync(fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(SegmentedFile, "sync_and_close", staticmethod(failing_sync))
    with pytest.raises(StoreError, match="fsync failed"):
        await store.append([MessageToAppend("t", 0, b"not acknowledged")])
    with pytest.raises(StoreError, match="accepts no more writes"):
        await store.append([MessageToAppend("t", 0, b"refused")])
    info = await store.info()
    assert not info.writable
    assert "fsync failed" in info.last_error
    # the unacknowledged record was never indexed; reads still work
    result = await store.read("t", 0, 0, max_count=10)
    assert [m.body for m in result.messages] == [b"durable"]
    monkeypatch.undo()
    await store.close()

    reopened = LocalStore.open(tmp_path / "d", small_settings(flush_mode=FlushMode.SYNC))
    result = await reopened.read("t", 0, 0, max_count=10)
    assert result.status is ReadStatus.FOUND
    assert result.messages[0].body == b"durable"
    assert result.messages[0].queue_offset == kept.queue_offset
    (after,) = await reopened.append([MessageToAppend("t", 0, b"after restart")])
    assert (await reopened.info()).writable
    assert after.queue_offset == result.max_queue_offset
    await reopened.close()
