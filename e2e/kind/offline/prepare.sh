#!/usr/bin/env bash
# Everything `make e2e-kind` needs when no container registry is reachable, built here from
# Debian packages, PyPI and the Go module proxy only, and reused when nothing changed:
#
#   prepare.sh              # prints PYTHON_BASE=… NODE_IMAGE=… on stdout
#   prepare.sh base stand-ins   # only those stages (names below; prints nothing)
#
#   stage            what                                                      cached as
#   base             debootstrap bookworm -> popfleet.local/debian:bookworm    tarball in ~/.cache/popfleet/offline
#   stand-ins        a python:3.11 stand-in (the base of our three             image label popfleet.key
#                    Dockerfiles, passed as --build-arg BASE)
#   binaries         kubelet/kubeadm/kube-proxy, etcd, coredns, crictl, ...    ~/.cache/popfleet/kind-bin-<k8s>-<key>
#   kind base        kind v0.29.0's base image from Debian packages            image label popfleet.key
#   node image       what `kind build node-image` does, offline                tag popfleet.local/kind-node:<k8s>-<key>
#
# Every key is a hash of the inputs (scripts, Dockerfiles, pins, Go toolchain), so a change
# rebuilds exactly what it affects. One progress line per stage with its duration (stderr).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
export PATH=/usr/local/go/bin:$PATH
CACHE=${POPFLEET_CACHE:-$HOME/.cache/popfleet}
KIND_VERSION=${KIND_VERSION:-v0.29.0}
DEBIAN=popfleet.local/debian:bookworm
PYTHON_BASE=popfleet.local/python:3.11-bookworm

stage() { # name command...
  local name=$1 start=$SECONDS; shift
  "$@" >&2
  printf '== e2e-kind offline: %-14s %4ss\n' "$name" "$(( SECONDS - start ))" >&2
}
hash_of() { cat "$@" | sha256sum | cut -c1-12; }
label() { docker image inspect -f '{{index .Config.Labels "popfleet.key"}}' "$1" 2>/dev/null || true; }

# build TAG from DOCKERFILE (context: an empty dir + FILES) unless its key label matches
keyed_build() { # tag dockerfile key [files...]
  local tag=$1 df=$2 key=$3; shift 3
  if [ "$(label "$tag")" = "$key" ]; then return 0; fi
  local ctx; ctx=$(mktemp -d)
  if [ $# -gt 0 ]; then cp "$@" "$ctx/"; fi
  nice -n 10 docker build -q --label "popfleet.key=$key" -f "$df" -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "   built $tag" >&2
}

base_key() { label "$DEBIAN"; }

standins() {
  local b; b=$(base_key)
  keyed_build "$PYTHON_BASE" "$here/images/python.Dockerfile" "$(echo "$b" | hash_of - "$here/images/python.Dockerfile")"
}

K8S=$(cd "$repo/tools/k8s" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
BIN_KEY=$( { go env GOVERSION; cat "$here/build-bins.sh" "$repo/tools/k8s/go.sum"; } | hash_of -)
BIN_DIR=$CACHE/kind-bin-${K8S#v}-$BIN_KEY/bin

binaries() {
  if [ -s "$BIN_DIR/.complete" ]; then return 0; fi
  "$here/build-bins.sh" "$BIN_DIR"
  date -u +%FT%TZ > "$BIN_DIR/.complete"
}

KIND_BASE=popfleet.local/kind-base:$KIND_VERSION
kind_base_key() { echo "$(base_key) $KIND_VERSION" | hash_of - "$here/mk-kind-base.sh" "$here/kind-base/Dockerfile"; }
kind_base() {
  local key; key=$(kind_base_key)
  if [ "$(label "$KIND_BASE")" = "$key" ]; then return 0; fi
  TAG=$KIND_BASE KEY=$key "$here/mk-kind-base.sh"
}

node_image() {
  if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then return 0; fi
  BASE_IMAGE=$KIND_BASE "$here/mk-node-image.sh" "$BIN_DIR" "$NODE_IMAGE"
}

only=" $* "
want() { [ "$only" = "  " ] || [[ "$only" == *" $1 "* ]]; }
want base && stage base "$here/mk-base.sh"
want stand-ins && stage stand-ins standins
want binaries && stage "node binaries" binaries
want kind-base && stage "kind base" kind_base
[ "$only" = "  " ] || exit 0
NODE_KEY=$( { kind_base_key; echo "$BIN_KEY"; cat "$here/mk-node-image.sh";
              find "$here/images" "$here/manifests" -type f | sort | xargs cat; } | hash_of -)
NODE_IMAGE=popfleet.local/kind-node:$K8S-$NODE_KEY
stage "node image" node_image
printf 'PYTHON_BASE=%s\nNODE_IMAGE=%s\n' "$PYTHON_BASE" "$NODE_IMAGE"
