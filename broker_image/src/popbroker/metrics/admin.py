"""Metrics of the admin API (served by the store role): ``popfleet_admin_requests_total``.

``popfleet_admin_requests_total{method,code}`` counts every ``BrokerAdmin`` call
the servicer answered, as it ends: ``method`` is the RPC name (``ListTopics``,
``SetConsumeMode``, ...; at most the service's methods), ``code`` the gRPC status
name (``OK``, ``NOT_FOUND``, ``INVALID_ARGUMENT``, ...; at most gRPC's codes), so
both labels are bounded. A scan counts once, when its stream ends. Calls the token
check refuses before the servicer runs, and ``grpc.health.v1`` probes, are not
counted. Divided by the CRs an operator reconciled, it is the broker admin calls
per CR that issue 15's operator-scale benchmark reports.

Counted by :mod:`popbroker.admin.servicer` through :meth:`AdminMetrics.count`;
the store role registers it in its ``/metrics`` registry (:mod:`popbroker.roles.store`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class AdminMetrics:
    """The admin API's counters in ``registry`` (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "popfleet_admin_requests",
            "Admin API calls answered, by method and gRPC status code",
            ["method", "code"],
            registry=registry,
        )

    def count(self, method: str, code: str) -> None:
        self.requests.labels(method, code).inc()
