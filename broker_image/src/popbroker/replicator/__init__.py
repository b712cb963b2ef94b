"""Replication between the stores of a broker set (issue 18): the pure rules of
:mod:`popbroker.replication` applied to a :class:`~popbroker.store.local.LocalStore`. The
store role runs it with ``--replica-name``
(:mod:`popbroker.replicator.replication_role`); the operator does not set that yet."""
