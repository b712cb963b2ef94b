"""The uninstall tests get the testbed only: each installs and uninstalls its own release.

A package of its own (not under tests/integration/operator) so that the operator package's
release, which watches every namespace, is gone before these run: two operators must never
act on the same objects.
"""

from __future__ import annotations

from popfleet_testbed.fixtures import testbed, testbed_namespace

__all__ = ["testbed", "testbed_namespace"]
