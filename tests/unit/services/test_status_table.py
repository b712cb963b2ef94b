"""The domain error -> v2 Code table: every error has a real code, never 0."""

from __future__ import annotations

import pytest

from popbroker.grpc import statuses
from popbroker.grpc.protocol import Code
from popbroker.pop import errors as pop_errors
from popbroker.services import errors as service_errors
from popbroker.store import errors as store_errors


def _subclasses(base: type[BaseException]) -> list[type[BaseException]]:
    found: list[type[BaseException]] = [base]
    for sub in base.__subclasses__():
        found.extend(_subclasses(sub))
    return found


ALL_ERRORS = sorted(
    {
        *_subclasses(pop_errors.PopError),
        *_subclasses(store_errors.StoreError),
        *_subclasses(service_errors.ServiceError),
    },
    key=lambda cls: cls.__qualname__,
)


@pytest.mark.parametrize("error", ALL_ERRORS, ids=lambda cls: cls.__qualname__)
def test_every_domain_error_has_a_nonzero_code(error: type[BaseException]) -> None:
    instance = error("x", field="tag") if error is service_errors.IllegalMessage else error("x")
    code = statuses.code_of(instance)
    assert code != Code.CODE_UNSPECIFIED
    assert code in Code.values()


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (pop_errors.InvalidReceiptHandle("x"), Code.INVALID_RECEIPT_HANDLE),
        (pop_errors.IllegalInvisibleTime("x"), Code.ILLEGAL_INVISIBLE_TIME),
        (service_errors.TooManyRequests("x"), Code.TOO_MANY_REQUESTS),
        (store_errors.EmptyBody("x"), Code.MESSAGE_BODY_EMPTY),
        (service_errors.IllegalMessage("x", field="keys"), Code.ILLEGAL_MESSAGE_KEY),
        (RuntimeError("x"), Code.INTERNAL_SERVER_ERROR),
        # replication: codes the official clients retry (a send on their next queue)
        (store_errors.NotLeader("x"), Code.HA_NOT_AVAILABLE),
        (store_errors.NotEnoughReplicas("x"), Code.HA_NOT_AVAILABLE),
        (store_errors.ReplicationTimeout("x"), Code.SLAVE_PERSISTENCE_TIMEOUT),
    ],
)
def test_selected_codes(error: BaseException, code: int) -> None:
    assert statuses.code_of(error) == code
