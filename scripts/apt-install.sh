#!/usr/bin/env bash
# Install Debian packages for a make target or a script, starting no service.
#
#   scripts/apt-install.sh PACKAGE...
#
# Packages like docker.io, containerd or redis-server start their daemon from their install
# scripts. Started here, such a daemon would inherit our stdout/stderr -- in CI the pipe of
# the test log -- and outlive us, so the log would never end (and it is a process nobody
# asked for). A policy-rc.d that refuses every start (exit 101) is in place while apt runs;
# the output goes to $APT_LOG (default /var/log/popfleet-apt.log), its tail to stderr on
# failure. Needs root.
set -euo pipefail
if [ $# -eq 0 ]; then
  sed -n '4p' "${BASH_SOURCE[0]}" >&2
  exit 2
fi
log=${APT_LOG:-/var/log/popfleet-apt.log}
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
echo "apt: installing $* (log: $log)" >&2
if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "$@"; } >>"$log" 2>&1 </dev/null; then
  echo "apt: installing $* failed; tail of $log:" >&2
  tail -30 "$log" >&2
  exit 1
fi
