"""kopf handlers (the edge): importing the modules registers them (``__main__`` does).

``settings`` configures kopf and builds the shared runtime (Kubernetes client, broker
connection pool) at start-up; ``clusters``, ``topics`` and ``groups`` reconcile the three
kinds as named steps; ``audits`` runs the BrokerClusters' audit schedules; ``metrics`` holds
the Prometheus series.
"""
