"""The broker's admin API server (``popfleet.admin.v1.BrokerAdmin``, DESIGN §3.5).

Served by the ``store`` role (or ``popbroker all``) on its own port, separate
from the RocketMQ client port, for the operator, the audit jobs and people
(``popfleet-admin``). Modules:

  * :mod:`~popbroker.admin.errors` -- refusals and the one table from store
    errors to gRPC status codes;
  * :mod:`~popbroker.admin.convert` -- admin protos <-> store values and the read
    models of :mod:`popbroker.inspect`, with the input validation of every
    request (pure);
  * :mod:`~popbroker.admin.scanning` -- paged revive-log and offset-table scans;
  * :mod:`~popbroker.admin.servicer` -- the RPCs;
  * :mod:`~popbroker.admin.server` -- ``serve_admin``: token check, health, port.

It imports the store, the pure POP core, the read models (:mod:`popbroker.inspect`:
offsets, revive statistics, the POP state) and the generated stubs of
``popfleet_api``; never the services or the client endpoint.
"""
