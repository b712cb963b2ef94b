"""Peer systems for ``bench/pop_peers.py``: popfleet next to NATS JetStream and Redis Streams.

* :mod:`bench.peers.procs`      a server process started by us, stopped by its PID;
* :mod:`bench.peers.servers`    locate (or install from Debian) and start each server
  on a temp dir and a free 127.0.0.1 port;
* :mod:`bench.peers.workload`   the adapter protocol and the drivers that measure
  every system the same way (produce, pop+ack, latency, redelivery);
* :mod:`bench.peers.natsload`, :mod:`bench.peers.redisload`, :mod:`bench.peers.v2load`
  one adapter per system (``v2load`` is our batching RocketMQ v2 gRPC client);
* :mod:`bench.peers.officialload` the official ``rocketmq-python-client`` figure.

:mod:`procs` and :mod:`servers` use the standard library only, so the smoke test
in ``tests/integration/bench`` runs without the bench-only client packages.
"""
