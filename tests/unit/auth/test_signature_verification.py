"""The MQv2-HMAC-SHA1 header: what the official client sends verifies; nothing else does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rocketmq.v5.util.signature import Signature

from popbroker.auth import signature
from popbroker.auth.errors import Unauthenticated

SECRETS = {"app": "s3cret", "ops": "other-secret"}
NOW = datetime(2026, 11, 21, 10, 50, 12, tzinfo=UTC)
DATE = "20261121T105012Z"


def headers(ak: str = "app", sk: str = "s3cret", date: str = DATE) -> dict[str, str]:
    sig = signature.sign(sk, date)
    return {
        "x-mq-date-time": date,
        "authorization": f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
        f"Signature={sig}",
    }


def verify(h: dict[str, str], **kwargs: int) -> str:
    return signature.verify(h, SECRETS, now=NOW, **kwargs)


def test_the_official_clients_signature_is_ours() -> None:
    assert signature.sign("s3cret", DATE) == Signature.sign("s3cret", DATE)


def test_a_valid_header_yields_its_access_key() -> None:
    assert verify(headers()) == "app"
    assert verify(headers("ops", "other-secret")) == "ops"


def test_upper_case_hex_is_the_same_signature() -> None:
    h = headers()
    head, _, sig = h["authorization"].rpartition("=")
    h["authorization"] = f"{head}={sig.upper()}"
    assert verify(h) == "app"


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda h: h.pop("authorization"), "no authorization header"),
        (lambda h: h.update(authorization=""), "no authorization header"),
        (lambda h: h.pop("x-mq-date-time"), "x-mq-date-time header required"),
        (lambda h: h.update({"x-mq-date-time": "yesterday"}), "YYYYMMDDTHHMMSSZ"),
        (lambda h: h.update({"x-mq-date-time": "20261341T105012Z"}), "not a valid time"),
    ],
    ids=["missing", "empty", "no-date", "garbage-date", "impossible-date"],
)
def test_missing_and_garbage_headers_are_unauthenticated(mutate: object, reason: str) -> None:
    h = headers()
    mutate(h)  # type: ignore[operator]
    with pytest.raises(Unauthenticated, match=reason):
        verify(h)


def test_a_forged_signature_is_refused() -> None:
    h = headers(sk="guessed")
    with pytest.raises(Unauthenticated, match="signature does not match"):
        verify(h)


def test_a_signature_for_another_date_is_refused() -> None:
    h = headers()
    h["x-mq-date-time"] = "20261121T105013Z"  # signed for :12, presented with :13
    with pytest.raises(Unauthenticated, match="signature does not match"):
        verify(h)


def test_an_unknown_access_key_is_refused_even_with_an_empty_secret_signature() -> None:
    with pytest.raises(Unauthenticated, match="unknown access key"):
        verify(headers(ak="nobody", sk=""))
    with pytest.raises(Unauthenticated, match="unknown access key"):
        verify(headers(ak="nobody", sk="s3cret"))


def test_stale_and_future_dates_outside_the_skew_are_refused() -> None:
    old = (NOW - timedelta(seconds=901)).strftime(signature.DATE_FORMAT)
    with pytest.raises(Unauthenticated, match="clock skew"):
        verify(headers(date=old), max_clock_skew_s=900)
    ahead = (NOW + timedelta(hours=15)).strftime(signature.DATE_FORMAT)
    with pytest.raises(Unauthenticated, match="clock skew"):
        verify(headers(date=ahead))


def test_a_client_stamping_local_time_east_of_utc_is_within_the_default_skew() -> None:
    local = (NOW + timedelta(hours=14)).strftime(signature.DATE_FORMAT)
    assert verify(headers(date=local)) == "app"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("MQv2-HMAC-SHA256 Credential=app, SignedHeaders=x-mq-date-time, Signature=" + "0" * 40,
         "unsupported authorization scheme"),
        ("Bearer abc", "unsupported authorization scheme"),
        ("MQv2-HMAC-SHA1", "malformed authorization field"),
        ("MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time",
         "lacks Signature"),
        ("MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, Signature=abc",
         "not 40 hex digits"),
        ("MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, Signature=" + "g" * 40,
         "not 40 hex digits"),
        ("MQv2-HMAC-SHA1 Credential=app, SignedHeaders=host, Signature=" + "0" * 40,
         "SignedHeaders must be x-mq-date-time"),
        ("MQv2-HMAC-SHA1 Credential=app, Credential=ops, SignedHeaders=x-mq-date-time, "
         "Signature=" + "0" * 40, "given twice"),
        ("MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=" + "0" * 40,
         "lacks Credential"),
        ("MQv2-HMAC-SHA1 Credential=app, Region=x, Signature=" + "0" * 40,
         "malformed authorization field 'Region'"),
        ("MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, Signature=" + "0" * 2000,
         "too long"),
    ],
    ids=["sha256", "bearer", "no-fields", "truncated", "short-sig", "non-hex", "other-header",
         "repeated", "empty-ak", "unknown-field", "oversized"],
)  # fmt: skip
def test_malformed_authorization_headers_are_refused(value: str, reason: str) -> None:
    h = headers()
    h["authorization"] = value
    with pytest.raises(Unauthenticated, match=reason):
        verify(h)


def test_the_official_client_metadata_verifies() -> None:
    class Config:
        class credentials:  # noqa: N801 - mimics the client's attribute
            ak, sk = "app", "s3cret"

        namespace = ""

    metadata = dict(Signature.metadata(Config, "client-1"))
    now = datetime.strptime(metadata["x-mq-date-time"], signature.DATE_FORMAT).replace(tzinfo=UTC)
    assert signature.verify(metadata, SECRETS, now=now) == "app"
