#!/usr/bin/env bash
# The kubeflow Spark operator (SparkApplication v1beta2), built from the Go module proxy and
# cached; prints the binary's path on stdout (progress on stderr).
#
#   build.sh            # -> ~/.cache/popfleet/spark-operator-<pseudo-version>-<key>/spark-operator
#
# The newest kubeflow spark-operator versions are refused by our Go proxy; this pseudo-version of
# github.com/GoogleCloudPlatform/spark-on-k8s-operator (December 2020: client-go 0.16, Spark
# 3.0's spark-submit arguments) is served. It builds with today's Go once one dependency that
# left its vanity domain is replaced at the same pseudo-version (vbom.ml/util ->
# github.com/fvbommel/util). Its v1beta1 CRDs are converted by convert_crds.py.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH=/usr/local/go/bin:$PATH GOFLAGS=-mod=mod
MODULE=github.com/GoogleCloudPlatform/spark-on-k8s-operator
VERSION=${SPARK_OPERATOR_VERSION:-v0.0.0-20201215015655-2e8b733f5ad0}
VBOM=v0.0.0-20160121211510-db5cfe13f5cc
CACHE=${POPFLEET_CACHE:-$HOME/.cache/popfleet}
key=$( (go version; echo "$VERSION $VBOM"; cat "${BASH_SOURCE[0]}") | sha256sum | cut -c1-12)
out="$CACHE/spark-operator-$VERSION-$key"
if [ -x "$out/spark-operator" ]; then
  echo "$out/spark-operator"
  exit 0
fi
started=$SECONDS
src=$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "build.sh: go mod download $MODULE@$VERSION gave no directory" >&2; exit 1; }
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
(
  cd "$work"
  go mod edit -replace "vbom.ml/util=github.com/fvbommel/util@$VBOM"
  nice -n 10 go build -trimpath -ldflags '-s -w' -o "$work/spark-operator" . >&2
)
mkdir -p "$out"
cp "$work/spark-operator" "$out/spark-operator.tmp"
python3 "$here/convert_crds.py" "$src"/manifest/crds/*.yaml > "$out/crds.yaml.tmp"
mv "$out/crds.yaml.tmp" "$out/crds.yaml"
mv "$out/spark-operator.tmp" "$out/spark-operator"
echo "== spark-operator $VERSION built in $(( SECONDS - started ))s" >&2
echo "$out/spark-operator"
