"""popfleet's end-to-end scenario (DESIGN §1), runnable against any cluster, and ``make demo``.

``scenario`` orders the steps; ``steps`` and ``lifecycle`` are the steps; ``access`` is how a
cluster is reached (kubeconfig, kubectl/helm, endpoint resolver); ``traffic`` drives the
official RocketMQ client; ``testbed`` adapts the local testbed; ``demo`` is ``make demo``.
"""
