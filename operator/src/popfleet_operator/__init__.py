"""popfleet operator: runs BrokerClusters and keeps Topics and ConsumerGroups on every broker.

Layers (import-linter): ``handlers`` (kopf) -> ``clients`` (Kubernetes API, broker admin
API) -> ``builders`` | ``status`` | ``planning`` (pure) -> ``model`` (parsed specs, names).
``errors`` is the one error hierarchy; ``python -m popfleet_operator`` runs it.
"""
