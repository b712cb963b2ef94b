"""The testbed's one error hierarchy.

``retriable`` says whether the same call may succeed later (the apiserver is still starting,
a ConfigMap a pod needs does not exist yet); callers poll on retriable errors and fail fast on
the others.
"""

from __future__ import annotations


class TestbedError(Exception):
    """Anything the testbed cannot do; not retriable unless a subclass says so."""

    __test__ = False  # not a pytest test class despite the name
    retriable = False


class NotReadyYet(TestbedError):
    """A dependency (object, process, endpoint) is not there yet."""

    retriable = True


class KubeError(TestbedError):
    """The apiserver answered with an error status."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.retriable = status >= 500 or status == 429 or status == 409


class Timeout(TestbedError):
    """A bounded wait ran out."""
