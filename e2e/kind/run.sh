#!/usr/bin/env bash
# The e2e scenario on a kind cluster (`make e2e-kind`; needs Docker).
#
#   e2e/kind/run.sh [--values FILE] [--keep]
#
# 1. create the kind cluster of kind-config.yaml (pinned node image), unless it exists;
# 2. build the broker, operator and audit images from this tree with docker and `kind load`
#    them, under the names the chart and CRDs default to (ghcr.io/popfleet/<x>:<appVersion>);
# 3. run the shared scenario (popfleet_e2e, the code e2e/local runs) with the chart values
#    of --values (default values/kind.yaml) through e2e/kind/kind_access.py, which reaches
#    broker pods through a CONNECT proxy pod (proxy_tunnel.py);
# 4. delete the cluster, unless --keep.
#
# Environment: KIND (kind binary), BIN_DIR (kubectl and helm), PY (python with popfleet_e2e),
# all set by mk/kind.mk; KIND_CLUSTER (default popfleet-e2e).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
values="$here/values/kind.yaml"
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --values) values=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

: "${KIND:?KIND must name the kind binary (make e2e-kind sets it)}"
: "${BIN_DIR:?BIN_DIR must hold kubectl and helm (make e2e-kind sets it)}"
: "${PY:?PY must be the python that has popfleet_e2e (make e2e-kind sets it)}"
cluster=${KIND_CLUSTER:-popfleet-e2e}
work=$(mktemp -d)
kubeconfig="$work/kubeconfig"
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/popfleet/Chart.yaml")

say() { printf '\n== e2e-kind: %s\n' "$*"; }

docker info >/dev/null 2>&1 || { echo "e2e-kind needs a running Docker engine" >&2; exit 1; }
if [ -z "$version" ]; then
  echo "cannot read appVersion from charts/popfleet/Chart.yaml" >&2; exit 1
fi

cleanup() {
  rc=$?
  if [ "$keep" -eq 0 ]; then
    say "deleting cluster $cluster"
    "$KIND" delete cluster --name "$cluster" || true
  else
    say "kept: export KUBECONFIG=$kubeconfig"
  fi
  [ "$keep" -eq 1 ] || rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

if "$KIND" get clusters | grep -qx "$cluster"; then
  say "reusing cluster $cluster"
  "$KIND" export kubeconfig --name "$cluster" --kubeconfig "$kubeconfig"
else
  say "creating cluster $cluster"
  "$KIND" create cluster --name "$cluster" --config "$here/kind-config.yaml" \
    --kubeconfig "$kubeconfig" --wait 120s
fi

for image in broker:broker_image operator:operator audit:spark_operator_jobs; do
  name=${image%%:*}
  dir=${image#*:}
  tag="ghcr.io/popfleet/$name:$version"
  say "building $tag from $dir/Dockerfile"
  docker build -f "$repo/$dir/Dockerfile" -t "$tag" "$repo"
  "$KIND" load docker-image "$tag" --name "$cluster"
done

say "running the scenario with $values"
"$PY" "$here/kind_access.py" --kubeconfig "$kubeconfig" --bin-dir "$BIN_DIR" --values "$values"
say "passed"
