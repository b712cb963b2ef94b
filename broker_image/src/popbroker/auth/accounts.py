"""The credentials file: who may connect, and what each access key may touch.

``--credentials-file PATH`` (YAML, or JSON since JSON is YAML)::

    # maxClockSkewSeconds: 900      # optional; default 51300 (14 h 15 min, see signature.py)
    accounts:
      - accessKey: orders-app
        secretKey: "change-me"
        publish: [orders, "audit-*"]  # topics it may send to
        subscribe: [orders]           # topics it may receive from (and route, ack, pull)
        groups: [billing]             # consumer groups it may consume as
      - accessKey: ops
        secretKey: "..."
        publish: ["*"]
        subscribe: ["*"]
        groups: ["*"]

A pattern is an exact name, a prefix ending in ``*``, or ``*`` (everything);
absent lists grant nothing. A retry topic ``%RETRY%G+T`` needs group ``G`` and
subscribe on ``T``; a DLQ ``%DLQ%G`` needs group ``G``. Unknown fields,
duplicate or blank access keys, blank secrets and non-string patterns are
refused with a clear :class:`~popbroker.auth.errors.BadCredentialsFile`: the
role does not start on a file it cannot fully understand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from popbroker.auth.errors import BadCredentialsFile, Forbidden
from popbroker.auth.signature import DEFAULT_MAX_CLOCK_SKEW_S
from popbroker.store import names

_ACCOUNT_FIELDS = {"accessKey", "secretKey", "publish", "subscribe", "groups"}
_TOP_FIELDS = {"accounts", "maxClockSkewSeconds"}


@dataclass(frozen=True, slots=True)
class Patterns:
    """Names matched exactly, by prefix (``p*``), or all (``*``)."""

    exact: frozenset[str]
    prefixes: tuple[str, ...]

    @classmethod
    def of(cls, patterns: Sequence[str]) -> Patterns:
        exact = frozenset(p for p in patterns if not p.endswith("*"))
        prefixes = tuple(p[:-1] for p in patterns if p.endswith("*"))
        return cls(exact, prefixes)

    def match(self, name: str) -> bool:
        return name in self.exact or name.startswith(self.prefixes)


@dataclass(frozen=True, slots=True)
class Account:
    """One access key and its permissions."""

    access_key: str
    secret_key: str
    publish: Patterns
    subscribe: Patterns
    groups: Patterns

    def check_publish(self, topic: str) -> None:
        if not self.publish.match(topic):
            raise Forbidden(f"{self.access_key} may not publish to topic {topic}")

    def check_group(self, group: str) -> None:
        if not self.groups.match(group):
            raise Forbidden(f"{self.access_key} may not consume as group {group}")

    def check_subscribe(self, topic: str) -> None:
        retry = names.parse_retry_topic(topic)
        if retry is not None:
            self.check_group(retry[0])
            topic = retry[1]
        elif topic.startswith(names.DLQ_PREFIX):
            self.check_group(topic[len(names.DLQ_PREFIX) :])
            return
        if not self.subscribe.match(topic):
            raise Forbidden(f"{self.access_key} may not subscribe to topic {topic}")

    def check_route(self, topic: str) -> None:
        """A route is needed to publish or to subscribe: either permission will do."""
        if not (self.publish.match(topic) or self.subscribe.match(topic)):
            raise Forbidden(f"{self.access_key} may neither publish to nor subscribe to {topic}")


@dataclass(frozen=True, slots=True)
class Accounts:
    """All accounts of a credentials file, by access key."""

    by_key: Mapping[str, Account]
    max_clock_skew_s: int = DEFAULT_MAX_CLOCK_SKEW_S

    @property
    def secrets(self) -> dict[str, str]:
        return {key: account.secret_key for key, account in self.by_key.items()}


def _patterns(raw: Mapping[str, Any], field: str, where: str) -> Patterns:
    value = raw.get(field, [])
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise BadCredentialsFile(f"{where}.{field}: a list of non-empty names or patterns")
    return Patterns.of(value)


def _account(raw: object, where: str) -> Account:
    if not isinstance(raw, dict):
        raise BadCredentialsFile(f"{where}: an account is a mapping")
    unknown = set(raw) - _ACCOUNT_FIELDS
    if unknown:
        raise BadCredentialsFile(f"{where}: unknown fields {sorted(unknown)}")
    access_key, secret_key = raw.get("accessKey"), raw.get("secretKey")
    if not isinstance(access_key, str) or not access_key.strip():
        raise BadCredentialsFile(f"{where}.accessKey: a non-empty string")
    if any(c.isspace() or c == "," for c in access_key):
        raise BadCredentialsFile(f"{where}.accessKey: no spaces or commas")
    if not isinstance(secret_key, str) or not secret_key:
        raise BadCredentialsFile(f"{where}.secretKey: a non-empty string")
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        publish=_patterns(raw, "publish", where),
        subscribe=_patterns(raw, "subscribe", where),
        groups=_patterns(raw, "groups", where),
    )


def parse(document: object) -> Accounts:
    """Accounts from a parsed YAML/JSON document (see the module docstring)."""
    if not isinstance(document, dict):
        raise BadCredentialsFile("the credentials file holds a mapping with 'accounts'")
    unknown = set(document) - _TOP_FIELDS
    if unknown:
        raise BadCredentialsFile(f"unknown fields {sorted(unknown)}")
    raw_accounts = document.get("accounts")
    if not isinstance(raw_accounts, list) or not raw_accounts:
        raise BadCredentialsFile("accounts: a non-empty list")
    by_key: dict[str, Account] = {}
    for index, raw in enumerate(raw_accounts):
        account = _account(raw, f"accounts[{index}]")
        if account.access_key in by_key:
            raise BadCredentialsFile(f"accounts[{index}]: access key given twice")
        by_key[account.access_key] = account
    skew = document.get("maxClockSkewSeconds", DEFAULT_MAX_CLOCK_SKEW_S)
    if not isinstance(skew, int) or isinstance(skew, bool) or skew < 0:
        raise BadCredentialsFile("maxClockSkewSeconds: a non-negative integer")
    return Accounts(by_key, skew)


def load(path: Path) -> Accounts:
    """Read and parse ``path``; any problem is a :class:`BadCredentialsFile` naming it."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BadCredentialsFile(f"credentials file {path}: {exc}") from exc
    try:
        return parse(document)
    except BadCredentialsFile as exc:
        raise BadCredentialsFile(f"credentials file {path}: {exc}") from exc
