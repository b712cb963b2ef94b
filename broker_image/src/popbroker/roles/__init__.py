"""The broker's roles: one composition root per ``popbroker`` subcommand (DESIGN §3).

The top layer of the broker (below only :mod:`popbroker.cli`): each module wires
the store, the services, the gRPC endpoint, the admin API and the metrics into
one process, with its flags and its start/stop order.

  * :mod:`~popbroker.roles.store` -- ``popbroker store``: a ``LocalStore`` behind
    the store wire API, the admin API and ``/metrics`` beside it;
  * :mod:`~popbroker.roles.popack` -- ``popbroker popack``: the v2 endpoint in
    front of a store role;
  * :mod:`~popbroker.roles.revive` -- ``popbroker revive``: revive loops against
    a store role (``ReviveRole``);
  * :mod:`~popbroker.roles.all` -- ``popbroker all``: the three in one process on
    an in-process store (``LivePopState`` for the admin API);
  * :mod:`~popbroker.roles.demo` -- ``popbroker demo``: the store-only demo;
  * :mod:`~popbroker.roles.running` -- what they share: signals, port files, the
    store socket, the role's metrics registry and endpoint.

Submodules are imported one by one (this package imports nothing), so a role
process loads only what it runs.
"""
