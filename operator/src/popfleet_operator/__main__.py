"""``python -m popfleet_operator``: run the operator (the image's entry point).

Environment (the chart sets the ones it needs; the others keep their defaults):

===============================  =========================================================
``POPFLEET_NAMESPACES``          comma-separated namespaces to watch; empty: cluster-wide
``POPFLEET_PEERING_NAME``        kopf peering object (``ClusterKopfPeering``); empty: standalone
``POPFLEET_PRIORITY``            this replica's peering priority (higher wins)
``POPFLEET_RESYNC_INTERVAL_S``   level-based re-check of every object (default 60)
``POPFLEET_ADMIN_TIMEOUT_S``     deadline of each broker admin call (default 5)
``POPFLEET_CLUSTER_VIEW_TTL_S``  reuse of a BrokerCluster's spec/token/pods (default 2)
``POPFLEET_VERIFY_INTERVAL_S``   full read-back of a steady Topic/ConsumerGroup (default 900)
``POPFLEET_UNREACHABLE_AFTER_S`` a resync reports a silent broker after this long (default 30)
``POPFLEET_ROUND_LIMIT``         Topic/ConsumerGroup rounds at once (default 16)
``POPFLEET_BROKER_CALL_LIMIT``   admin calls under way per broker (default 8)
``POPFLEET_METRICS_LISTEN``      ``HOST:PORT`` for Prometheus ``/metrics``; empty: none
``POPFLEET_HEALTH_LISTEN``       ``HOST:PORT`` for the liveness ``/healthz``; empty: none
``POPFLEET_LOOP_STALL_S``        event loop stuck this long: ``/healthz`` fails (default 20)
``POPFLEET_LOG_LEVEL``           default INFO
===============================  =========================================================
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from typing import cast

import kopf
from kopf._core.engines.peering import Identity  # kopf.run's type, not re-exported


def identity() -> Identity:
    """This replica's name for kopf's peering: the pod's host name and the process.

    Given explicitly because kopf's default asks the OS for the user name, which fails (and
    crashed the operator at start) under a UID with no passwd entry, as clusters that assign
    random UIDs run it.
    """
    return Identity(f"{socket.gethostname()}/{os.getpid()}")


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """One stderr handler on the root logger with kopf's object-prefixing formatter.

    ``LOG_FORMAT`` as before (``time LEVEL logger: message``: the tests' and benchmarks' log
    checks look for `` ERROR ``); lines logged about an object (every handler's ``logger``,
    kopf's own per-object lines) get ``[namespace/name]`` before the message, so a line can
    be tied to its object (``basicConfig`` dropped it). kopf's ``configure`` also mutes
    asyncio's debug chatter; the level is ours (``$POPFLEET_LOG_LEVEL``), not kopf's
    verbose/quiet flags. kopf's formatter factory takes a format string as well as its
    ``LogFormat`` enum (it matches on ``str``), though its signature names only the enum.
    """
    kopf.configure(log_format=cast(kopf.LogFormat, LOG_FORMAT), log_prefix=True)
    logging.getLogger().setLevel(level)
    objects = logging.getLogger("kopf.objects")
    for found in [f for f in objects.filters if isinstance(f, QuietTimers)]:
        objects.removeFilter(found)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        objects.addFilter(QuietTimers())


class QuietTimers(logging.Filter):
    """Drops kopf's ``Timer 'resync' succeeded.`` (INFO, one per object per resync tick).

    At 2,000 objects and a 60 s resync that is 33 lines a second, 2.9 million a day, saying
    nothing: a tick that finds work logs it itself, a failed one is a warning. Kept at DEBUG.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        return not (
            record.levelno == logging.INFO
            and message.startswith("Timer '")
            and message.endswith("' succeeded.")
        )


def main() -> int:
    configure_logging(os.environ.get("POPFLEET_LOG_LEVEL", "INFO"))
    # Importing the handler modules registers them with kopf.
    from popfleet_operator.handlers import (  # noqa: PLC0415, F401
        audits,
        clusters,
        groups,
        settings,
        topics,
        wakeups,
    )

    namespaces = [n for n in os.environ.get("POPFLEET_NAMESPACES", "").split(",") if n]
    peering = os.environ.get("POPFLEET_PEERING_NAME", "")
    kopf.run(
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=not peering,
        peering_name=peering or None,
        priority=int(os.environ.get("POPFLEET_PRIORITY", "0")),
        identity=identity(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
