"""popfleet_api: the broker admin API as the operator, the audit jobs and people use it.

* :mod:`popfleet_api.client` -- ``BrokerAdmin`` (async, grpc.aio) and the
  ``BrokerAdminApi`` Protocol it implements;
* :mod:`popfleet_api.models` -- the frozen values every call takes and returns;
* :mod:`popfleet_api.errors` -- the one error hierarchy (``retriable`` flags);
* :mod:`popfleet_api.convert` -- the only code that touches the proto messages;
* :mod:`popfleet_api.cli` -- ``popfleet-admin``, the mqadmin equivalent;
* ``popfleet_api.admin.v1`` -- stubs generated from ``api/proto`` (``make proto-api``).

This package never imports the broker (``popbroker``); the broker's admin server
imports the generated stubs from here.
"""
