"""Prometheus series of the operator (served on ``$POPFLEET_METRICS_LISTEN``)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter(
    "popfleet_operator_reconciles",
    "Reconcile rounds by kind and result (ok, degraded, retry, failed)",
    ["kind", "result"],
)
RECONCILED_KINDS = ("BrokerCluster", "Topic", "ConsumerGroup")
RESULTS = ("ok", "degraded", "retry", "failed")
# Every (kind, result) exists from the start, at 0: a rate over ``result="failed"`` (the
# PopfleetReconcileFailing alert, the fleet dashboard) is 0 rather than no data before the
# first failure, and the first failure is an increase Prometheus can see.
for _kind in RECONCILED_KINDS:
    for _result in RESULTS:
        RECONCILES.labels(_kind, _result)
RECONCILE_SECONDS = Histogram(
    "popfleet_operator_reconcile_seconds",
    "Duration of reconcile rounds by kind",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BROKERS_IN_SYNC = Gauge(
    "popfleet_operator_brokers_in_sync",
    "Brokers that confirmed an object on read-back",
    ["kind", "namespace", "name"],
)
BROKERS_EXPECTED = Gauge(
    "popfleet_operator_brokers_expected",
    "Brokers an object should be on",
    ["kind", "namespace", "name"],
)
READY_BROKERS = Gauge(
    "popfleet_operator_ready_brokers", "Ready brokers of a BrokerCluster", ["namespace", "name"]
)
# One series per object and condition type it has (Ready, Reconciling, Degraded, TopicSynced,
# ModeApplied, AuditHealthy): what the alerts on Degraded, ModeApplied and audits read.
CONDITION = Gauge(
    "popfleet_operator_condition",
    "1 while the object's condition of this type is True, else 0",
    ["kind", "namespace", "name", "type"],
)
CONDITION_TYPES = ("Ready", "Reconciling", "Degraded", "TopicSynced", "ModeApplied", "AuditHealthy")


def conditions(object_key: tuple[str, str, str], written: Iterable[Mapping[str, Any]]) -> None:
    """The conditions of ``(kind, namespace, name)`` as last written (``status.conditions``
    entries)."""
    kind, namespace, name = object_key
    for condition in written:
        value = 1 if condition.get("status") == "True" else 0
        CONDITION.labels(kind, namespace, name, str(condition.get("type"))).set(value)


@contextmanager
def timed(kind: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        RECONCILE_SECONDS.labels(kind).observe(time.monotonic() - start)


def forget(kind: str, namespace: str, name: str) -> None:
    for gauge in (BROKERS_IN_SYNC, BROKERS_EXPECTED):
        with suppress(KeyError):
            gauge.remove(kind, namespace, name)
    for condition_type in CONDITION_TYPES:
        with suppress(KeyError):
            CONDITION.remove(kind, namespace, name, condition_type)
    if kind == "BrokerCluster":
        with suppress(KeyError):
            READY_BROKERS.remove(namespace, name)
