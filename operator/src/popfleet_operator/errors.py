"""The operator's one error hierarchy (STYLE §8).

``retriable`` errors become ``kopf.TemporaryError`` (retry with back-off); the others become
``kopf.PermanentError`` naming their ``reason`` (``handlers.runtime.reconcile_round``; the
resync timer still re-checks every object). ``reason`` is the stable condition reason.
Handlers translate, most of them into a condition before anything reaches
``reconcile_round`` (``InvalidSpec``, ``ClusterNotFound``, ``SecretNotFound``); nothing below
the handlers imports kopf. Backlog that blocks a deletion or a scale-down and unreachable
brokers are outcomes, not errors: conditions ``DeletionBlocked``, ``ScaleDownBlocked`` and
``BrokerUnreachable`` say so.
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


class KubeError(OperatorError):
    """The Kubernetes API refused or failed a call; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message, reason="KubernetesError")
        self.status = status
        self.retriable = status >= 500 or status in (0, 409, 429)
