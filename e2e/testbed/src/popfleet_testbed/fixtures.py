"""pytest fixtures: a session-wide testbed and a fresh namespace per test.

Use from any test tree by importing them in its ``conftest.py``::

    from popfleet_testbed.fixtures import testbed, testbed_namespace  # noqa: F401

``testbed`` (session scope) reuses the testbed whose run directory ``POPFLEET_TESTBED`` names
(started with ``make testbed-up``; it is left running), otherwise starts one in a temporary
run directory and tears it down at the end of the session. Binaries must already be built
(``make testbed-bin``): a cold build takes far longer than any test timeout, so a missing build
fails fast instead of starting one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from popfleet_testbed import binaries, cluster, controlplane, errors


@pytest.fixture(scope="session")
def testbed() -> Iterator[cluster.Cluster]:
    reuse = os.environ.get("POPFLEET_TESTBED")
    if reuse:
        if not controlplane.running(Path(reuse)):
            raise errors.TestbedError(f"POPFLEET_TESTBED={reuse}: no running testbed there")
        handle = cluster.Cluster(controlplane.Info.load(Path(reuse)))
        yield handle
        handle.close()
        return
    bin_dir = os.environ.get("POPFLEET_K8S_BIN")
    bins = binaries.Binaries(Path(bin_dir)) if bin_dir else binaries.locate()
    run_dir = Path(tempfile.mkdtemp(prefix="popfleet-testbed-"))
    info = controlplane.up(run_dir, bins=bins)
    handle = cluster.Cluster(info)
    try:
        yield handle
    finally:
        handle.close()
        keep = os.environ.get("POPFLEET_TESTBED_KEEP_LOGS") == "1"
        controlplane.down(run_dir, remove=not keep)


@pytest.fixture
def testbed_namespace(testbed: cluster.Cluster) -> Iterator[str]:
    name = testbed.new_namespace()
    yield name
    testbed.delete_namespace(name)
