"""The testbed's self-tests use its own fixtures (see popfleet_testbed.fixtures)."""

from popfleet_testbed.fixtures import testbed, testbed_namespace

__all__ = ["testbed", "testbed_namespace"]
