"""popfleet's local Kubernetes testbed: a real control plane on loopback and a process kubelet.

See ``e2e/testbed/README.md``. Entry points: ``cli`` (``popfleet-testbed``), ``fixtures``
(pytest), ``controlplane.up``/``down`` (library use).
"""
