"""The official clients' request signature: parse it, check it, learn the access key.

Every v2 call of the official clients (``rocketmq/v5/util/signature.py``) carries

    x-mq-date-time: 20261121T105012Z
    authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>

where ``<hex>`` is the lowercase hex of HMAC-SHA1(key = secret key, message =
the ``x-mq-date-time`` value, both UTF-8). Only that one signed header exists.

:func:`parse_authorization` refuses anything else (another algorithm, missing or
repeated fields, other signed headers, a signature that is not 40 hex digits);
:func:`verify` then checks the date header and recomputes the HMAC with the
account's secret, comparing in constant time. Every refusal is
:class:`~popbroker.auth.errors.Unauthenticated` with a reason that names the
problem but never echoes a secret.

Freshness: the clients stamp *local* time with a ``Z`` suffix, so a client in
UTC+14 looks 14 hours ahead. The accepted window is therefore
``max_clock_skew_s`` either side of the server's UTC clock, by default 14 h
15 min; a fleet whose clients run in UTC can narrow it in the credentials file.
The signature covers only the date, so it is a per-second bearer value: use TLS
where the network is not trusted.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from popbroker.auth.errors import Unauthenticated

ALGORITHM = "MQv2-HMAC-SHA1"
AUTHORIZATION_HEADER = "authorization"
DATE_HEADER = "x-mq-date-time"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
DEFAULT_MAX_CLOCK_SKEW_S = 14 * 3600 + 15 * 60
MAX_HEADER_CHARS = 1024

_DATE = re.compile(r"^[0-9]{8}T[0-9]{6}Z$")
_HEX_SIGNATURE = re.compile(r"^[0-9a-fA-F]{40}$")
_FIELDS = ("Credential", "SignedHeaders", "Signature")
# What the official clients send, byte for byte: one match instead of the field-by-field parse.
_CANONICAL = re.compile(
    r"^MQv2-HMAC-SHA1 Credential=([^,\s=]+), SignedHeaders=x-mq-date-time, "
    r"Signature=([0-9a-fA-F]{40})$"
)


@dataclass(frozen=True, slots=True)
class Authorization:
    """A parsed ``authorization`` header."""

    access_key: str
    signed_headers: tuple[str, ...]
    signature: str  # 40 lowercase hex digits


def sign(secret_key: str, date_time: str) -> str:
    """The signature a client with ``secret_key`` sends for ``date_time``."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def parse_authorization(value: str) -> Authorization:
    """Parse ``MQv2-HMAC-SHA1 Credential=..., SignedHeaders=..., Signature=...``."""
    if len(value) > MAX_HEADER_CHARS:
        raise Unauthenticated("authorization header too long")
    canonical = _CANONICAL.fullmatch(value)
    if canonical is not None:
        return Authorization(canonical[1], (DATE_HEADER,), canonical[2].lower())
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise Unauthenticated(f"unsupported authorization scheme (expected {ALGORITHM})")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, eq, field_value = part.strip().partition("=")
        if not eq or name not in _FIELDS:
            raise Unauthenticated(f"malformed authorization field {name or part.strip()!r}")
        if name in fields:
            raise Unauthenticated(f"authorization field {name} given twice")
        fields[name] = field_value.strip()
    missing = [name for name in _FIELDS if not fields.get(name)]
    if missing:
        raise Unauthenticated(f"authorization lacks {', '.join(missing)}")
    signed = tuple(h.strip().lower() for h in fields["SignedHeaders"].split(";"))
    if signed != (DATE_HEADER,):
        raise Unauthenticated(f"SignedHeaders must be {DATE_HEADER}")
    if not _HEX_SIGNATURE.fullmatch(fields["Signature"]):
        raise Unauthenticated("Signature is not 40 hex digits")
    return Authorization(fields["Credential"], signed, fields["Signature"].lower())


def parse_date(value: str) -> datetime:
    """The ``x-mq-date-time`` value as an aware UTC datetime."""
    if not _DATE.fullmatch(value):
        raise Unauthenticated(f"{DATE_HEADER} is not of the form YYYYMMDDTHHMMSSZ")
    try:  # by hand: strptime costs more than the rest of the check (it runs on every call)
        return datetime(
            int(value[0:4]),
            int(value[4:6]),
            int(value[6:8]),
            int(value[9:11]),
            int(value[11:13]),
            int(value[13:15]),
            tzinfo=UTC,
        )
    except ValueError as exc:
        raise Unauthenticated(f"{DATE_HEADER} is not a valid time") from exc


def verify(
    headers: Mapping[str, str],
    secrets: Mapping[str, str],
    *,
    now: datetime,
    max_clock_skew_s: int = DEFAULT_MAX_CLOCK_SKEW_S,
) -> str:
    """The verified access key of a call with ``headers`` (lower-case names).

    ``secrets`` maps access keys to secret keys; ``now`` is the server's aware UTC time.
    """
    value = headers.get(AUTHORIZATION_HEADER)
    if not value:
        raise Unauthenticated("credentials required: no authorization header")
    auth = parse_authorization(value)
    date_value = headers.get(DATE_HEADER)
    if not date_value:
        raise Unauthenticated(f"{DATE_HEADER} header required")
    skew = abs((parse_date(date_value) - now).total_seconds())
    if skew > max_clock_skew_s:
        raise Unauthenticated(f"{DATE_HEADER} is outside the accepted clock skew")
    secret = secrets.get(auth.access_key)
    # Compute the HMAC for unknown keys too, so timing does not tell which keys exist.
    expected = sign(secret if secret is not None else "", date_value)
    if not hmac.compare_digest(expected.encode(), auth.signature.encode()) or secret is None:
        raise Unauthenticated("signature does not match (unknown access key or wrong secret)")
    return auth.access_key
