"""``ClusterAccess`` for the local testbed (e2e/testbed): its kubeconfig, binaries and loopback.

In the testbed pod IPs are loopback addresses, so the resolver is ``loopback_only``: brokers
are dialled at the endpoints they advertise, and anything else is refused.
"""

from __future__ import annotations

from popfleet_e2e.access import ClusterAccess, loopback_only
from popfleet_testbed import controlplane


def access(info: controlplane.Info, namespace: str) -> ClusterAccess:
    home = info.run_dir / "home"
    home.mkdir(exist_ok=True)
    return ClusterAccess(
        kubeconfig=info.layout.admin_kubeconfig,
        namespace=namespace,
        resolve=loopback_only,
        bin_dir=info.bin_dir,
        home=home,
    )
