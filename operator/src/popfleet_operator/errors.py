"""The operator's one error hierarchy (STYLE §8).

``retriable`` errors become ``kopf.TemporaryError`` (retry with back-off, a ``Degraded`` or
``Reconciling`` condition saying why); the others become ``kopf.PermanentError`` with a
condition. ``reason`` is the stable condition reason. Handlers translate; nothing below
them imports kopf.
"""

from __future__ import annotations


class OperatorError(Exception):
    retriable: bool = False
    reason: str = "InternalError"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason


class InvalidSpec(OperatorError):
    """The spec passed the schema but cannot be carried out as written."""

    reason = "InvalidSpec"


class ClusterNotFound(OperatorError):
    """A Topic or ConsumerGroup names a BrokerCluster that does not exist (yet)."""

    retriable = True
    reason = "ClusterNotFound"


class SecretNotFound(OperatorError):
    """A Secret (or its key) the spec names is missing; it may be created later."""

    retriable = True
    reason = "SecretNotFound"


class BrokersUnreachable(OperatorError):
    retriable = True
    reason = "BrokerUnreachable"


class BacklogRemains(OperatorError):
    """Deletion or scale-down refused: messages are still waiting to be consumed."""

    retriable = True
    reason = "BacklogRemains"


class KubeError(OperatorError):
    """The Kubernetes API refused or failed a call; ``status`` is the HTTP status."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message, reason="KubernetesError")
        self.status = status
        self.retriable = status >= 500 or status in (0, 409, 429)
