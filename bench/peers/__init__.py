"""Peer systems for ``bench/pop_peers.py`` and ``bench/pop_peers_loadgen.py``.

popfleet next to Apache RocketMQ, NATS JetStream and Redis Streams:

* :mod:`bench.peers.procs`      a server process (or a set of them) started by us,
  stopped by its PID;
* :mod:`bench.peers.servers`    locate (or install from Debian) and start NATS, Redis
  and popfleet (``popbroker all`` or its three role processes) on a temp dir and a
  free 127.0.0.1 port;
* :mod:`bench.peers.rocketmq`   Apache RocketMQ 5.3.3 from Maven Central: name server
  and local-mode proxy in a private network namespace that has only loopback;
* :mod:`bench.peers.cpu`        server CPU seconds of a process tree from ``/proc``;
* :mod:`bench.peers.summary`    medians, spreads, ratios, the rotating run order;
* :mod:`bench.peers.loadgen`    build and run the compiled load generator
  (``bench/loadgen``, Go) that drives all four systems;
* :mod:`bench.peers.workload`   the Python drivers' adapter protocol and phases;
* :mod:`bench.peers.natsload`, :mod:`bench.peers.redisload`, :mod:`bench.peers.v2load`
  one Python adapter per system (``v2load`` is our batching RocketMQ v2 gRPC client);
* :mod:`bench.peers.officialload` the official ``rocketmq-python-client`` figure.

:mod:`procs`, :mod:`servers`, :mod:`rocketmq`, :mod:`cpu`, :mod:`summary` and
:mod:`loadgen` use the standard library only, so the tests in ``tests/unit/bench``
and ``tests/integration/bench`` run without the bench-only client packages.
"""
