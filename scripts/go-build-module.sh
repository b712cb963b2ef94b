#!/usr/bin/env bash
# Build commands of a Go module that `go install MODULE@VERSION` refuses (it has `replace`
# directives), from a writable copy of the module the Go module proxy serves. Static
# (CGO_ENABLED=0), stripped, into OUT; OUT/.complete is written last, so an interrupted build
# is built again. Used by mk/monitoring.mk for prometheus-operator and KEDA (issue 19; the
# recipe is ../shared/reference/observability-offline.md).
#
#   scripts/go-build-module.sh MODULE@VERSION OUT "LDFLAGS" "DROP-REPLACE..." ./cmd/a[=name] ...
#
# DROP-REPLACE names module paths whose `replace` is dropped (prometheus-operator replaces two
# nested modules with directories its zip does not hold; the proxy serves them at the same
# tag). ./cmd/a=name builds ./cmd/a as OUT/name. KEEP="PATH..." copies those paths of the
# module (manifests, e.g. prometheus-operator's bundle.yaml, KEDA's config/) into OUT too.
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n '7p' "${BASH_SOURCE[0]}" >&2
  exit 2
fi
module=$1 out=$2 ldflags=$3 drop=$4
shift 4
work=$(mktemp -d /tmp/popfleet-go-build.XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod CGO_ENABLED=0 GOWORK=off
src=$(cd / && GOFLAGS='' go mod download -json "$module" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -n "$src" ] || { echo "go-build-module: $module: no module directory" >&2; exit 1; }
cp -r "$src" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
for path in $drop; do
  go mod edit -dropreplace="$path"
done
mkdir -p "$out"
rm -f "$out/.complete"
for spec in "$@"; do
  pkg=${spec%%=*}
  name=${spec#*=}
  [ "$name" != "$spec" ] || name=$(basename "$pkg")
  echo "go-build-module: $module $pkg -> $out/$name" >&2
  go build -trimpath -ldflags "-s -w $ldflags" -o "$out/$name" "$pkg"
done
for path in ${KEEP:-}; do
  rm -rf "${out:?}/$(basename "$path")"
  cp -r "$src/$path" "$out/"
  chmod -R u+w "$out/$(basename "$path")"
done
touch "$out/.complete"
