#!/usr/bin/env bash
# The kind cluster config with N worker nodes beside the control plane, on stdout:
# kind-config.yaml (its networks, its control plane) plus N `role: worker` entries pinned to
# the same node image (an offline run overrides every node's image with --image).
#
#   kind-config.sh N
#
# N=0 prints kind-config.yaml unchanged (the one-node cluster of make e2e-kind).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
workers=${1:?usage: kind-config.sh WORKERS}
case "$workers" in ''|*[!0-9]*) echo "kind-config.sh: WORKERS is a count, not $workers" >&2; exit 2 ;; esac
pin=$(sed -n 's/^ *image: *\(kindest\/node:.*\)$/\1/p' "$here/kind-config.yaml")
if [ -z "$pin" ]; then echo "kind-config.sh: no node image pin in kind-config.yaml" >&2; exit 1; fi
cat "$here/kind-config.yaml"
for _ in $(seq 1 "$workers"); do
  printf '  - role: worker\n    image: %s\n' "$pin"
done
