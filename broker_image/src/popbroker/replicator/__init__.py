"""Replication between the stores of a broker set (issue 18, WORK IN PROGRESS): the pure
rules of :mod:`popbroker.replication` applied to a :class:`~popbroker.store.local.LocalStore`.
No role runs it yet."""
