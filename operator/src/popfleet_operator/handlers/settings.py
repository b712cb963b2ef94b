"""kopf configuration and the operator's start-up and clean-up.

* progress and the last-handled spec live in ``kopf.popfleet.io/*`` annotations, not in
  ``status.kopf`` (our structural status schema would prune it). kopf leaves annotations
  under its own prefix out of the diff, so it must not be ``popfleet.io``: the pause,
  managed and wake-up annotations there have to count as changes;
* the finalizer is ``popfleet.io/finalizer``. kopf puts it on every kind: on Topics and
  ConsumerGroups for their ``deleted`` handlers, on BrokerClusters too because kopf adds it
  for any object with a timer (``resync``, ``audits``), to stop the timer before the object
  goes (``uninstalling`` relies on the operator removing it);
* handler log lines are not all posted as Events (only warnings); the reconcilers post
  their own Events for transitions;
* concurrency: kopf's ``queueing.worker_limit`` stays unset (a worker sleeping out a
  retry back-off would hold its slot and starve the other objects); the work is bounded by
  ``runtime.ROUND_LIMIT`` (rounds at once) and ``runtime.BROKER_CALL_LIMIT`` (per broker);
* deletion: a CR's timer still in a round when the CR is deleted is looked at again every
  ``CANCELLATION_POLLING_S`` (kopf's default is 60 s), so the finalizer can go about a second
  after that round ends;
* liveness: ``/healthz`` on ``$POPFLEET_HEALTH_LISTEN`` is ours (``liveness``), answered
  from a thread off the busy event loop, not kopf's;
* peering: kopf's own (``ClusterKopfPeering`` named by ``$POPFLEET_PEERING_NAME``) so two
  replicas never both act; the chart installs the peering CRD.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

import kopf
from prometheus_client import start_http_server

from popfleet_operator.clients import kube as kube_client
from popfleet_operator.clients.brokers import BrokerPool, connect_grpc
from popfleet_operator.handlers import liveness, runtime

log = logging.getLogger(__name__)
KOPF_PREFIX = "kopf.popfleet.io"
CANCELLATION_POLLING_S = 1.0
LOOP_STALL_S = float(os.environ.get("POPFLEET_LOOP_STALL_S", str(liveness.STALL_S)))


def _listen(variable: str) -> tuple[str, int] | None:
    value = os.environ.get(variable, "")
    return liveness.parse_listen(value) if value else None


def start_liveness(memo: kopf.Memo) -> None:
    """``/healthz`` from a thread, fed by a heartbeat task on this loop (``liveness``)."""
    listen = _listen("POPFLEET_HEALTH_LISTEN")
    if listen is None or "liveness" in memo:  # none wanted, or started by an earlier try
        return
    heartbeat = liveness.Heartbeat(stall_s=LOOP_STALL_S)
    server = liveness.Server(*listen, heartbeat=heartbeat)
    server.start()
    memo["liveness"] = (server, asyncio.create_task(liveness.keep_beating(heartbeat)))
    log.info("liveness on %s:%d%s", *listen, liveness.PATH)


async def stop_liveness(memo: kopf.Memo) -> None:
    found = memo.get("liveness")
    if found is None:
        return
    server, beating = found
    beating.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await beating
    server.stop()


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """$KUBECONFIG when set (the local testbed's pods have one), else the service account."""
    if os.environ.get("KUBECONFIG"):
        return kopf.login_with_kubeconfig(**kwargs)
    return kopf.login_with_service_account(**kwargs)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = "popfleet.io/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.batching.error_delays = (1, 2, 5, 10, 30, 60)
    # A CR deleted while its resync timer is mid-round: kopf stops the timer and, unless the
    # round ends with a patch (an event), looks again only after this long before it lets the
    # finalizer go. kopf's default is 60 s; a Retain delete once took over a minute in CI
    # (suspected cause, not reproduced on demand).
    settings.background.cancellation_polling = CANCELLATION_POLLING_S
    start_liveness(memo)
    listen = _listen("POPFLEET_METRICS_LISTEN")
    if listen:
        try:
            start_http_server(listen[1], addr=listen[0])
            log.info("metrics on %s:%d", *listen)
        except OSError as exc:  # metrics are not worth a crash loop; the log says why
            log.warning("metrics: cannot listen on %s:%d: %s", *listen, exc)
    memo["runtime"] = runtime.Runtime(
        kube=await kube_client.Kube.connect(),
        pool=BrokerPool(
            connect_grpc(runtime.ADMIN_TIMEOUT_S), call_limit=runtime.BROKER_CALL_LIMIT
        ),
    )


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    found = memo.get("runtime")
    if isinstance(found, runtime.Runtime):
        await found.pool.close()
        await found.kube.close()
    await stop_liveness(memo)
