"""popbroker: the popfleet broker.

One package, three roles (DESIGN §3): ``store`` owns the data volume and serves
the store API; ``popack`` runs the POP engine behind the RocketMQ v2 gRPC
endpoint; ``revive`` turns expired checkpoints into retries. ``popbroker all``
runs the three in one process.
"""

__version__ = "0.1.0"
