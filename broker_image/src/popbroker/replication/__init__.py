"""Broker-set replication (issue 18): the pure rules first (:mod:`popbroker.replication.rules`)."""
