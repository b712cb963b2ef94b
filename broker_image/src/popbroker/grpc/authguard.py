"""The auth check in front of every v2 RPC (a ``grpc.aio`` server interceptor).

Installed by :class:`~popbroker.grpc.server.PopackEndpoint` when the role has a
``--credentials-file``; without one there is no guard and clients are anonymous.

Per call:

1. Authenticate from metadata alone (:func:`popbroker.auth.signature.verify`):
   missing, malformed, forged, stale or unknown → the RPC's own response with
   ``status UNAUTHORIZED`` (the servicer never runs); a client id first used by
   another access key → ``FORBIDDEN``.
2. Authorize from the request (:func:`popbroker.auth.resources.authorize`):
   no permission → ``status FORBIDDEN``. Telemetry needs step 1 only.

Refusals are answered in the response body with gRPC status OK, like every
other failure (fact sheet §6), so the official clients raise their
``UnauthorizedException`` / ``ForbiddenException``. ``grpc.health.v1`` is not
guarded (kubelet probes carry no credentials).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from popbroker.auth import resources, signature
from popbroker.auth.accounts import Account, Accounts
from popbroker.auth.clientids import ClientIdOwners
from popbroker.auth.errors import AuthError
from popbroker.grpc import convert, handlers, statuses

log = logging.getLogger(__name__)

CLIENT_ID_HEADER = "x-mq-client-id"


def utc_now() -> datetime:
    return datetime.now(UTC)


def _headers(metadata: Any) -> dict[str, str]:
    return {key: value for key, value in metadata or () if isinstance(value, str)}


def _refusal(rpc: str, exc: AuthError) -> Any:
    return handlers.response_type(rpc)(
        status=convert.status(statuses.code_of(exc), statuses.reason_of(exc))
    )


class AuthGuard(handlers.MessagingInterceptor):
    """Authenticate and authorize every ``MessagingService`` call (module docstring)."""

    def __init__(self, accounts: Accounts, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._accounts = accounts
        self._secrets = accounts.secrets
        self._clock = clock
        self._client_ids = ClientIdOwners()

    def authenticate(self, metadata: Any) -> Account:
        """The caller's account; its client id must be its own (:mod:`popbroker.auth.clientids`)."""
        headers = _headers(metadata)
        access_key = signature.verify(
            headers,
            self._secrets,
            now=self._clock(),
            max_clock_skew_s=self._accounts.max_clock_skew_s,
        )
        self._client_ids.claim(headers.get(CLIENT_ID_HEADER), access_key)
        return self._accounts.by_key[access_key]

    def wrap_rpc(self, handler: Any, rpc: str, handler_call_details: Any) -> Any:
        try:
            account = self.authenticate(handler_call_details.invocation_metadata)
        except AuthError as exc:
            log.info("%s refused: %s", rpc, exc.reason)
            return _refused(handler, rpc, exc)
        return _authorized(handler, rpc, account)


def _refused(handler: Any, rpc: str, exc: AuthError) -> Any:
    def unary(_behaviour: handlers.Unary) -> handlers.Unary:
        async def refuse(request: Any, context: Any) -> Any:
            return _refusal(rpc, exc)

        return refuse

    def streaming(_behaviour: handlers.Streaming) -> handlers.Streaming:
        async def refuse(request: Any, context: Any) -> AsyncIterator[Any]:
            if rpc == "Telemetry":
                # Bidi: take the client's first command before answering, so the stream
                # never ends under a client still writing it (its write would then fail
                # with INTERNAL instead of reading UNAUTHORIZED).
                async for _command in request:
                    break
            yield _refusal(rpc, exc)

        return refuse

    return handlers.wrap(handler, unary=unary, streaming=streaming)


def _authorized(handler: Any, rpc: str, account: Account) -> Any:
    def unary(behaviour: handlers.Unary) -> handlers.Unary:
        async def checked(request: Any, context: Any) -> Any:
            try:
                resources.authorize(account, rpc, request)
            except AuthError as exc:
                log.info("%s forbidden: %s", rpc, exc.reason)
                return _refusal(rpc, exc)
            return await behaviour(request, context)

        return checked

    def streaming(behaviour: handlers.Streaming) -> handlers.Streaming:
        async def checked(request: Any, context: Any) -> AsyncIterator[Any]:
            if rpc == "Telemetry":  # bidi: ``request`` is the command stream
                async for response in _checked_telemetry(
                    behaviour, account, commands=request, context=context
                ):
                    yield response
                return
            try:
                resources.authorize(account, rpc, request)
            except AuthError as exc:
                log.info("%s forbidden: %s", rpc, exc.reason)
                yield _refusal(rpc, exc)
                return
            async for response in behaviour(request, context):
                yield response

        return checked

    return handlers.wrap(handler, unary=unary, streaming=streaming)


async def _checked_telemetry(
    behaviour: handlers.Streaming, account: Account, *, commands: Any, context: Any
) -> AsyncIterator[Any]:
    """Telemetry until a ``settings`` command the account may not send; that one is
    answered FORBIDDEN and ends the stream (the servicer never sees it)."""
    refused: list[AuthError] = []

    async def allowed() -> AsyncIterator[Any]:
        async for command in commands:
            if command.HasField("settings"):
                try:
                    resources.authorize_settings(account, command.settings)
                except AuthError as exc:
                    log.info("Telemetry settings forbidden: %s", exc.reason)
                    refused.append(exc)
                    return
            yield command

    async for response in behaviour(allowed(), context):
        yield response
    if refused:
        yield _refusal("Telemetry", refused[0])
