#!/usr/bin/env bash
# Keep this host's traffic for the kind cluster's pod and service networks on this machine.
#
#   host-routes.sh POD_CIDR SERVICE_CIDR
#
# Without a route, a host process that dials a pod or service address (10.244.x.x, 10.96.x.x)
# sends it out of the default route, off this machine. An `unreachable` route per network
# (metric 4000, so any more specific route a user has wins) makes such a dial fail at once,
# locally. The e2e reaches workloads only through 127.0.0.1 (port-forward to a proxy pod).
# Run before the cluster exists; idempotent. Needs root (CAP_NET_ADMIN); without it, prints
# why and exits 1 unless POPFLEET_NO_HOST_ROUTES=1 says the machine has its own guard.
set -euo pipefail
pods=${1:?usage: host-routes.sh POD_CIDR SERVICE_CIDR}
services=${2:?usage: host-routes.sh POD_CIDR SERVICE_CIDR}
if [ "$(id -u)" -ne 0 ]; then
  if [ "${POPFLEET_NO_HOST_ROUTES:-0}" = 1 ]; then
    echo "host routes: not root; skipped (POPFLEET_NO_HOST_ROUTES=1)" >&2
    exit 0
  fi
  echo "host routes: need root to add unreachable routes for $pods and $services" >&2
  echo "  (set POPFLEET_NO_HOST_ROUTES=1 where the machine keeps that traffic local itself)" >&2
  exit 1
fi
for net in "$pods" "$services"; do
  ip route replace unreachable "$net" metric 4000
done
ip route show | grep -E "^unreachable (${pods%/*}|${services%/*})/" >&2
