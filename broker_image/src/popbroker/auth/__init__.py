"""Client authentication and authorization for the v2 endpoint (DESIGN §3.4).

  * :mod:`popbroker.auth.signature` — parse and verify the official clients'
    ``authorization: MQv2-HMAC-SHA1 ...`` header (pure, no I/O).
  * :mod:`popbroker.auth.accounts` — the credentials file: access keys, secret
    keys and per-resource permissions, and the permission checks.
  * :mod:`popbroker.auth.errors` — ``Unauthenticated`` (→ ``UNAUTHORIZED``) and
    ``Forbidden`` (→ ``FORBIDDEN``).

Enforcement lives at the gRPC edge (:mod:`popbroker.grpc.authguard`).
"""
