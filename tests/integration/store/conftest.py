"""Fixtures for the store contract suite: one ``store`` per implementation.

Every test that takes ``store`` runs against each implementation of ``StoreApi``
(STYLE §11): the in-process ``LocalStore``; ``RemoteStore`` talking to a store
process over a Unix socket, its unary calls framed (``remote``,
:mod:`popbroker.store.wire.frames`) or all on gRPC (``grpc``, what a TCP target
gets); and the framed ``RemoteStore`` reading the store's files itself (``direct``:
``popbroker popack --data-dir``, :mod:`popbroker.store.direct`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from popbroker.roles import running
from popbroker.store.api import FlushMode, StoreApi, TopicConfig
from popbroker.store.local import LocalStore
from tests.integration.store.remote_fixture import store_process_factory
from tests.storesettings import small_settings

IMPLEMENTATIONS = ["local", "remote", "grpc", "direct"]


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[FlushMode.ASYNC, FlushMode.SYNC], ids=["async", "sync"])
def flush_mode(request: pytest.FixtureRequest) -> FlushMode:
    mode: FlushMode = request.param
    return mode


@pytest.fixture
async def store(
    tmp_path: Path, implementation: str, flush_mode: FlushMode
) -> AsyncIterator[StoreApi]:
    settings = small_settings(flush_mode=flush_mode)
    if implementation == "local":
        local = LocalStore.open(tmp_path / "data", settings)
        try:
            await local.put_topic(TopicConfig("orders", read_queue_nums=4, write_queue_nums=4))
            yield local
        finally:
            await local.close()
        return
    with store_process_factory(tmp_path) as spawn:
        process = spawn(tmp_path / "data", settings=settings)
        remote = await process.connect(framed=implementation != "grpc")
        if implementation == "direct":
            remote.read_directly(running.direct_reads(tmp_path / "data", await remote.info()))
        try:
            await remote.put_topic(TopicConfig("orders", read_queue_nums=4, write_queue_nums=4))
            yield remote
        finally:
            await remote.close()


@pytest.fixture
def open_local(tmp_path: Path) -> Callable[..., LocalStore]:
    """Open (or reopen) a LocalStore in one directory; closes what it opened."""

    def _open(**overrides: object) -> LocalStore:
        return LocalStore.open(tmp_path / "data", small_settings(**overrides))

    return _open
