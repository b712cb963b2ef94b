"""Edges: the Kubernetes API (``kube``) and the brokers' admin API (``brokers``, ``fanout``)."""
