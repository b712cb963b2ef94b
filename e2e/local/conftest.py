"""e2e/local: the end-to-end story on the local testbed (fixture ``testbed``, e2e/testbed)."""

from __future__ import annotations

from popfleet_testbed.fixtures import testbed, testbed_namespace

__all__ = ["testbed", "testbed_namespace"]
