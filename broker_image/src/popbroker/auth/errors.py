"""Why a caller was refused: unknown (``Unauthenticated``) or not allowed (``Forbidden``)."""

from __future__ import annotations


class AuthError(Exception):
    """A refused call; ``reason`` is safe to send back to the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unauthenticated(AuthError):
    """Missing, malformed, forged or stale credentials, or an unknown access key."""


class Forbidden(AuthError):
    """A valid credential without the permission the request needs."""


class BadCredentialsFile(ValueError):
    """The credentials file cannot be used (the role refuses to start)."""
