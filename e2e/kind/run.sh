#!/usr/bin/env bash
# The e2e scenario on a real kind cluster (`make e2e-kind`), from an empty machine to a deleted
# cluster. One progress line per stage with its duration.
#
#   e2e/kind/run.sh [--values FILE] [--keep] [--reuse] [--images auto|upstream|offline]
#                   [--workers N]
#   e2e/kind/run.sh --bench SIZES      # bench.operator_scale on kind instead of the scenario
#   POPFLEET_E2E_SCENARIO=nodes e2e/kind/run.sh   # node loss (`make e2e-nodes`), below
#
#  1. engine     a Docker engine that answers; else Debian's docker.io installed and dockerd
#                started (offline/start-dockerd.sh; the capability filter only where needed);
#  2. images     upstream (the pinned Python base, kindest/node) when the registry
#                answers a pull of the pinned Python base; else offline: every base and the
#                node image built here from Debian, PyPI and the Go module proxy, cached
#                (offline/prepare.sh). --images or POPFLEET_KIND_IMAGES forces one;
#  3. routes     `unreachable` routes for the pod and service networks, before any cluster
#                exists (host-routes.sh): a host dial of a pod address never leaves the machine;
#  4. cluster    kind cluster from kind-config.yaml. One of that name that already exists is
#                the leftover of an interrupted run, with its objects in whatever state that run
#                left: it is deleted and created afresh, unless --reuse (for a --keep'd cluster
#                while iterating on the scenario);
#  5. build      broker, operator and audit images from this tree (--build-arg BASE=...),
#                `kind load`ed under the names the chart and CRDs default to; the kubeflow
#                Spark operator (sparkoperator/build.sh, cached) on the audit image;
#                prometheus-operator and Prometheus (observe/*.Dockerfile) from the binaries
#                make builds from the Go module proxy (cached under ~/.cache/popfleet);
#  6. smoke      every image's entry point on a read-only root, a random non-root UID and
#                HOME=/nonexistent, answering health (smoke_images.py);
#  7. scenario   the shared story (popfleet_e2e) plus the kind-only steps, via kind_access.py
#                (the host reaches pods only through a CONNECT proxy pod behind a port-forward);
#  8. cluster deleted, unless --keep.
#
# With --bench 100,500,1000 (`make bench-kind`), stages 4-5 and 7-8 run once per size instead:
# a fresh cluster, the images loaded, `python -m bench.operator_scale --target kind` for that
# size (the operator under the chart's memory limit), the cluster deleted.
#
# --workers N (or KIND_WORKERS) adds N worker nodes to the control plane (the config is
# kind-config.yaml plus N `role: worker` entries, kind-config.sh; images are loaded onto every node; the
# offline CNI stand-in routes pod traffic between nodes). Default 0: the one-node cluster.
# POPFLEET_E2E_SCENARIO=nodes (`make e2e-nodes`: the replicated set losing whole nodes,
# popfleet_e2e.nodeloss) defaults to --workers 3 and values/nodes.yaml, and builds and loads
# only the broker and operator images (no Spark operator, no monitoring, no smoke stage: the
# images are the ones make e2e-kind smokes).
#
# Environment: KIND (kind binary), BIN_DIR (kubectl and helm), PY (python with popfleet_e2e),
# PROMETHEUS_DIR and PROM_OPERATOR_BIN (the monitoring binaries), all set by mk/kind.mk;
# KEDA_BIN and KEDA_VERSION (KEDA's binaries and config/: make e2e-keda, with
# POPFLEET_E2E_SCENARIO=keda);
# KIND_CLUSTER (default popfleet-e2e).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
values="$here/values/kind.yaml"
keep=0
reuse=0
bench=""
mode=${POPFLEET_KIND_IMAGES:-auto}
scenario=${POPFLEET_E2E_SCENARIO:-kind}
workers=${KIND_WORKERS:-}
values_given=0
while [ $# -gt 0 ]; do
  case "$1" in
    --values) values=$2; values_given=1; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --reuse) reuse=1; shift ;;
    --images) mode=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    -h|--help) sed -n '2,46p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$mode" in auto|upstream|offline) ;; *) echo "run.sh: --images auto|upstream|offline" >&2; exit 2 ;; esac
# the node-loss scenario: three workers and no monitoring unless told otherwise
few_images=0
if [ "$scenario" = nodes ]; then
  few_images=1
  workers=${workers:-3}
  if [ "$values_given" -eq 0 ]; then values="$here/values/nodes.yaml"; fi
fi
workers=${workers:-0}
case "$workers" in ''|*[!0-9]*) echo "run.sh: --workers takes a count" >&2; exit 2 ;; esac

: "${KIND:?KIND must name the kind binary (make e2e-kind sets it)}"
: "${BIN_DIR:?BIN_DIR must hold kubectl and helm (make e2e-kind sets it)}"
: "${PY:?PY must be the python that has popfleet_e2e (make e2e-kind sets it)}"
cluster=${KIND_CLUSTER:-popfleet-e2e}
work=$(mktemp -d)
kubeconfig="$work/kubeconfig"
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/popfleet/Chart.yaml")
if [ -z "$version" ]; then
  echo "cannot read appVersion from charts/popfleet/Chart.yaml" >&2; exit 1
fi
subnet() { sed -n "s/^ *$1: *\([0-9./]*\) *$/\1/p" "$here/kind-config.yaml"; }
pod_cidr=$(subnet podSubnet)
service_cidr=$(subnet serviceSubnet)
# the cluster's config: kind-config.yaml, plus N workers on the control plane's node image
kind_config="$here/kind-config.yaml"
if [ "$workers" -gt 0 ]; then
  kind_config="$work/kind-config.yaml"
  "$here/kind-config.sh" "$workers" > "$kind_config"
fi
started=$SECONDS

stage_start=0
stage_name=""
begin() { stage_name=$1; stage_start=$SECONDS; printf '== e2e-kind: %s ...\n' "$1"; }
done_() { printf '== e2e-kind: %-9s ok in %ss%s\n' "$stage_name" "$(( SECONDS - stage_start ))" "${1:+ ($1)}"; }

cleanup() {
  rc=$?
  if [ "$keep" -eq 0 ]; then
    begin delete
    "$KIND" delete cluster --name "$cluster" >/dev/null 2>&1 || true
    done_
    rm -rf "$work"
  else
    printf '== e2e-kind: kept: export KUBECONFIG=%s\n' "$kubeconfig"
  fi
  printf '== e2e-kind: %s in %ss\n' "$([ "$rc" -eq 0 ] && echo passed || echo FAILED)" "$(( SECONDS - started ))"
  exit "$rc"
}
trap cleanup EXIT

begin engine
"$here/offline/start-dockerd.sh"
done_

begin images
python_pin=$(sed -n 's/^ARG BASE=\(python:.*\)$/\1/p' "$repo/broker_image/Dockerfile")
if [ "$mode" = auto ]; then
  if docker image inspect "$python_pin" >/dev/null 2>&1 \
     || timeout 120 docker pull -q "$python_pin" >/dev/null 2>&1; then
    mode=upstream
  else
    mode=offline
  fi
fi
python_base=$python_pin
node_image=""
if [ "$mode" = offline ]; then
  prepared=$("$here/offline/prepare.sh")
  python_base=$(sed -n 's/^PYTHON_BASE=//p' <<<"$prepared")
  node_image=$(sed -n 's/^NODE_IMAGE=//p' <<<"$prepared")
fi
done_ "$mode: ${node_image:-the node image pinned in kind-config.yaml}"

begin routes
"$here/host-routes.sh" "$pod_cidr" "$service_cidr"
done_ "unreachable $pod_cidr $service_cidr"

create_cluster() {
  begin cluster
  local how="created"
  if "$KIND" get clusters 2>/dev/null | grep -qx "$cluster"; then
    if [ "$reuse" -eq 1 ]; then
      "$KIND" export kubeconfig --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null 2>&1
      done_ "reused $cluster"
      return
    fi
    "$KIND" delete cluster --name "$cluster" >/dev/null 2>&1
    how="deleted a leftover $cluster and created it afresh"
  fi
  "$KIND" create cluster --name "$cluster" --config "$kind_config" \
    ${node_image:+--image "$node_image"} --kubeconfig "$kubeconfig" --wait 180s
  done_ "$how$([ "$workers" -gt 0 ] && echo ", 1 control plane + $workers workers")"
}

# docker build, quiet, at a lower priority; the legacy builder's deprecation notice dropped
build_image() {
  nice -n 10 docker build -q "$@" >/dev/null \
    2> >(grep -vE 'DEPRECATED: The legacy builder|Install the buildx|docs.docker.com/go/buildx|^ *$' >&2)
}

images=()
builds=("broker broker_image $python_base" "operator operator $python_base")
if [ "$few_images" -eq 0 ]; then builds+=("audit spark_operator_jobs $python_base"); fi
for spec in "${builds[@]}"; do
  read -r name dir base <<<"$spec"
  tag="ghcr.io/popfleet/$name:$version"
  begin "build $name"
  build_image --build-arg "BASE=$base" -f "$repo/$dir/Dockerfile" -t "$tag" "$repo"
  images+=("$tag")
  done_ "$tag"
done
# the broker build under a second tag: the rolling-upgrade step moves the brokers to it
next_broker="${images[0]}-next"
docker tag "${images[0]}" "$next_broker"
spark_operator_image=popfleet.local/spark-operator:e2e
spark_operator=""
if [ -z "$bench" ] && [ "$few_images" -eq 0 ]; then
  begin "build spark-operator"
  spark_operator=$("$here/sparkoperator/build.sh")
  build_image --build-arg "BASE=${images[2]}" -f "$here/sparkoperator/Dockerfile" \
    -t "$spark_operator_image" "$(dirname "$spark_operator")"
  done_ "$spark_operator_image"
fi

# The monitoring stack (issue 19): prometheus-operator's images under the names its bundle
# gives them (so the bundle applies unchanged), and Prometheus; static binaries cached by make.
monitoring_images=()
prometheus_image=""
prometheus_version=""
build_monitoring() {
  : "${PROMETHEUS_DIR:?PROMETHEUS_DIR must hold prometheus (make e2e-kind sets it)}"
  : "${PROM_OPERATOR_BIN:?PROM_OPERATOR_BIN must hold prometheus-operator (make e2e-kind sets it)}"
  local bundle=$PROM_OPERATOR_BIN/bundle.yaml operator reloader
  operator=$(sed -n 's/^ *image: \(quay.io\/prometheus-operator\/prometheus-operator:.*\)$/\1/p' "$bundle")
  reloader=$(sed -n 's/^ *- --prometheus-config-reloader=\(.*\)$/\1/p' "$bundle")
  prometheus_version=v$("$PROMETHEUS_DIR/prometheus" --version | sed -n 's/^prometheus, version \([0-9.]*\) .*/\1/p')
  prometheus_image=popfleet.local/prometheus:$prometheus_version
  if [ -z "$operator" ] || [ -z "$reloader" ] || [ "$prometheus_version" = v ]; then
    echo "run.sh: cannot read the monitoring images from $bundle and $PROMETHEUS_DIR" >&2; exit 1
  fi
  begin "build monitoring"
  for spec in "operator $operator" "config-reloader $reloader"; do
    read -r target tag <<<"$spec"
    build_image --target "$target" -f "$here/observe/prometheus-operator.Dockerfile" \
      -t "$tag" "$PROM_OPERATOR_BIN"
  done
  build_image -f "$here/observe/prometheus.Dockerfile" -t "$prometheus_image" "$PROMETHEUS_DIR"
  monitoring_images=("$operator" "$reloader" "$prometheus_image")
  done_ "${monitoring_images[*]}"
}
# KEDA (make e2e-keda sets KEDA_BIN): its operator and metrics apiserver, for the elastic step.
keda_images=()
build_keda() {
  local version=${KEDA_VERSION:?KEDA_VERSION must name the KEDA build (make e2e-keda sets it)}
  begin "build keda"
  for target in operator adapter; do
    build_image --target "$target" -f "$here/observe/keda.Dockerfile" \
      -t "popfleet.local/keda-$target:$version" "$KEDA_BIN"
    keda_images+=("popfleet.local/keda-$target:$version")
  done
  done_ "${keda_images[*]}"
}
if [ -z "$bench" ] && [ "$few_images" -eq 0 ]; then
  build_monitoring
  if [ -n "${KEDA_BIN:-}" ]; then
    build_keda
  fi
fi

load_images() { # tag... (one archive: layers the images share are sent once)
  begin load
  "$KIND" load docker-image "$@" --name "$cluster" >/dev/null
  done_ "$*"
}

if [ -n "$bench" ]; then
  operator_image=${images[1]}
  for size in ${bench//,/ }; do
    create_cluster
    load_images "${images[0]}" "$operator_image"  # the audit image is not used
    begin "bench $size"
    (cd "$repo" && "$PY" -m bench.operator_scale --target kind --sizes "$size" \
      --kubeconfig "$kubeconfig" --bin-dir "$BIN_DIR" --set "image.repository=${operator_image%:*}" \
      --set "image.tag=${operator_image##*:}" --set image.pullPolicy=Never)
    done_
    begin "delete $size"
    "$KIND" delete cluster --name "$cluster" >/dev/null 2>&1 || true
    done_
  done
  exit 0
fi

create_cluster
if [ "$few_images" -eq 1 ]; then
  load_images "${images[@]}"
  begin scenario
  "$PY" "$here/kind_access.py" --kubeconfig "$kubeconfig" --bin-dir "$BIN_DIR" --values "$values" \
    --node "$cluster-control-plane" --next-broker-image "$next_broker" --node-power
  done_
  exit 0
fi
load_images "${images[@]}" "$next_broker" "$spark_operator_image" "${monitoring_images[@]}" \
  ${keda_images[@]+"${keda_images[@]}"}

begin smoke
"$PY" "$here/smoke_images.py" --kubeconfig "$kubeconfig" "${images[@]}"
done_

begin scenario
"$PY" "$here/kind_access.py" --kubeconfig "$kubeconfig" --bin-dir "$BIN_DIR" --values "$values" \
  --node "$cluster-control-plane" --next-broker-image "$next_broker" \
  --spark-operator "$(dirname "$spark_operator")" \
  --monitoring-bundle "$PROM_OPERATOR_BIN/bundle.yaml" --prometheus-image "$prometheus_image" \
  ${KEDA_BIN:+--keda-config "$KEDA_BIN/config" --keda-images "${keda_images[0]},${keda_images[1]}"}
done_
