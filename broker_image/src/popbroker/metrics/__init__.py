"""Prometheus metrics of the broker roles (``--metrics-listen HOST:PORT``; DESIGN §7).

  * :mod:`popbroker.metrics.exposition` — the ``/metrics`` HTTP endpoint, served
    on the role's event loop; each scrape first runs the roles' refreshers, so
    gauges are read from live state at scrape time, never kept up to date on the
    hot paths.
  * :mod:`popbroker.metrics.popack` — v2 request and message counters (fed by
    :mod:`popbroker.grpc.observing`), parked long polls, the checkpoint buffer,
    in-flight POP messages.
  * :mod:`popbroker.metrics.revive` — revive lag, ledger state, retry and DLQ depths.
  * :mod:`popbroker.metrics.store` — the store's flush latency histogram.
  * :mod:`popbroker.metrics.admin` — admin API calls by method and status code.

Submodules are imported one by one (this package imports nothing), so the store
role can use :mod:`popbroker.metrics.store` without the services layer.
"""
