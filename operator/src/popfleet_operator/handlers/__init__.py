"""kopf handlers (the edge): importing the modules registers them (``__main__`` does).

``settings`` configures kopf and builds the shared runtime (Kubernetes client, broker
connection pool) at start-up; ``clusters``, ``topics`` and ``groups`` reconcile the three
kinds as named steps (the last two through ``fanning``'s shared steps); ``wakeups`` holds
the re-apply chain after a broker pod is replaced; ``audits`` runs the BrokerClusters'
audit schedules; ``runtime`` what every round shares; ``metrics`` the Prometheus series;
``liveness`` the ``/healthz`` answered from a thread off the event loop.
"""
