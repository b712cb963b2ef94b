#!/usr/bin/env bash
# Build popfleet.local/kind-base:v0.29.0 (see kind-base/Dockerfile) from kind v0.29.0's own files.
#   mk-kind-base.sh
set -euo pipefail
export PATH=/usr/local/go/bin:$PATH
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KIND_VERSION=${KIND_VERSION:-v0.29.0}
TAG=${TAG:-popfleet.local/kind-base:$KIND_VERSION}
KIND_SRC=$(cd / && GOFLAGS='' go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp -r "$KIND_SRC/images/base/files" "$ctx/files"
chmod -R u+w "$ctx/files"
cp "$here/kind-base/Dockerfile" "$ctx/"
start=$SECONDS
nice -n 10 docker build -q --label "popfleet.key=${KEY:-}" -t "$TAG" "$ctx" >/dev/null
echo "built $TAG in $(( SECONDS - start ))s" >&2

