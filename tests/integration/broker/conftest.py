"""Fixtures: a broker in its own processes, and official-client helpers.

``broker`` runs each test against ``popbroker all`` and against the three
role processes (store + popack + revive on a Unix socket): the same suite,
both deployments (DESIGN §3). The modules that prove the wire (official
Python and Node.js clients, auth, TLS, bad input, change of invisible time,
FIFO) also run both behind the compiled front end ``popfront``: such a module
sets ``BROKER_MODES = WITH_FRONT`` and ``pytest_generate_tests`` below gives its
``broker`` and ``shared_broker`` those modes.

The official client is used unmodified. Its local-IP probe (a UDP connect to
8.8.8.8 to learn the outbound address) is pre-seeded with 127.0.0.1 before any
client exists, so the tests touch nothing but loopback.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq.v5.util.misc import Misc

from popbroker.store.api import GroupConfig, MessageType, TopicConfig
from tests import eventloops
from tests.integration.broker.harness import MODES, BrokerProcess

Misc._Misc__LOCAL_IP = "127.0.0.1"


@pytest.fixture(autouse=True)
def main_thread_event_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Give synchronous tests a current event loop in the main thread, as a plain program
    has (why: tests/eventloops.py)."""
    if inspect.iscoroutinefunction(request.function):
        yield
        return
    with eventloops.current_event_loop():
        yield


TOPIC = "orders"
GROUP = "billing"
FIFO_TOPIC = "fifo-orders"
FIFO_GROUP = "fifo-billing"

TOPICS = [
    TopicConfig(TOPIC, read_queue_nums=4, write_queue_nums=4),
    TopicConfig(FIFO_TOPIC, read_queue_nums=2, write_queue_nums=2, message_type=MessageType.FIFO),
    TopicConfig("mixed", read_queue_nums=2, write_queue_nums=2, message_type=MessageType.MIXED),
]
GROUPS = [
    GroupConfig(GROUP, max_reconsume_times=2),
    GroupConfig("other", max_reconsume_times=16),
    GroupConfig(FIFO_GROUP, fifo=True),
]


@contextlib.contextmanager
def running(mode: str, work_dir: Path) -> Iterator[BrokerProcess]:
    """A broker in ``mode`` with the suite's topics and groups, stopped afterwards."""
    process = BrokerProcess.start(work_dir, mode=mode, topics=TOPICS, groups=GROUPS)
    try:
        yield process
    finally:
        process.stop()
        print(process.logs())  # shown by pytest only when the test failed


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``broker`` and ``shared_broker`` run in each mode of the module's ``BROKER_MODES``
    (default: the two deployments, ``harness.MODES``)."""
    modes = getattr(metafunc.module, "BROKER_MODES", MODES)
    if "broker" in metafunc.fixturenames:
        metafunc.parametrize("broker", modes, indirect=True, scope="function")
    if "shared_broker" in metafunc.fixturenames:
        metafunc.parametrize("shared_broker", modes, indirect=True, scope="module")


@pytest.fixture
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh broker per test, in each of the module's modes."""
    with running(str(request.param), tmp_path / "broker") as process:
        yield process


@pytest.fixture(scope="module")
def shared_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """One broker per module and deployment, for tests that leave no state behind."""
    with running(str(request.param), tmp_path_factory.mktemp("broker")) as process:
        yield process
