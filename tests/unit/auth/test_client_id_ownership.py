"""A client id belongs to the first access key that used it."""

from __future__ import annotations

import pytest

from popbroker.auth.clientids import ClientIdOwners
from popbroker.auth.errors import Forbidden


def test_the_first_key_owns_the_id_and_others_are_forbidden() -> None:
    owners = ClientIdOwners()
    owners.claim("host@1@0@abc", "app")
    owners.claim("host@1@0@abc", "app")
    with pytest.raises(Forbidden, match="another access key"):
        owners.claim("host@1@0@abc", "intruder")
    owners.claim("host@2@0@def", "intruder")
    owners.claim(None, "anyone")
    owners.claim("", "anyone")
    assert len(owners) == 2


def test_the_least_recently_seen_ids_are_forgotten_past_the_bound() -> None:
    owners = ClientIdOwners(max_entries=2)
    owners.claim("a", "k1")
    owners.claim("b", "k1")
    owners.claim("a", "k1")  # a is now the most recent
    owners.claim("c", "k1")  # b is forgotten
    assert len(owners) == 2
    owners.claim("b", "k2")  # a new owner for the forgotten id
    with pytest.raises(Forbidden):
        owners.claim("c", "k2")
    with pytest.raises(ValueError, match="positive"):
        ClientIdOwners(max_entries=0)
