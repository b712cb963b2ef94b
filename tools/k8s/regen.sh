#!/usr/bin/env bash
# Regenerate tools/k8s/go.mod + go.sum for a Kubernetes release (run by hand when bumping K8S).
#
# Why this exists: `go install k8s.io/kubernetes/cmd/...@vX` is refused because k/k's go.mod
# replaces every staging module (k8s.io/api, ...) with ./staging/src/...; a replace in *our*
# main module is honoured, so we map each staging module to its published v0.Y.Z tag.
# The list is generated from the release's own go.mod (its `=> ./staging/...` lines), never
# hand-maintained. etcd is built from the same module graph at the version k/k requires.
set -euo pipefail
cd "$(dirname "$0")"
K8S=${1:?usage: regen.sh 1.32.13 [helm-version]}
STG=0.${K8S#1.}
export PATH=/usr/local/go/bin:$PATH GOFLAGS=-mod=mod
rm -f go.mod go.sum
go mod init popfleet.invalid/tools/k8s
GOMOD=$(go mod download -json "k8s.io/kubernetes@v$K8S" \
        | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
# Same language version and GODEBUG defaults as the release (they come from the main module).
go mod edit -go="$(sed -n 's/^go //p' "$GOMOD")"
sed -n 's/^godebug \(.*\)$/\1/p' "$GOMOD" | while read -r kv; do go mod edit -godebug="$kv"; done
sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$GOMOD" | while read -r m; do
  go mod edit -replace="$m=$m@v$STG"
done
ETCD=$(sed -n 's#^[[:space:]]*go\.etcd\.io/etcd/server/v3 \(v[^ ]*\).*#\1#p' "$GOMOD")
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S" \
              "k8s.io/kubernetes/cmd/kube-controller-manager@v$K8S" \
              "k8s.io/kubernetes/cmd/kube-scheduler@v$K8S" \
              "k8s.io/kubernetes/cmd/kubectl@v$K8S"
go get -tool "go.etcd.io/etcd/server/v3@$ETCD"
go mod tidy
# The tidy must not have moved k8s.io/kubernetes or etcd off the pinned versions.
test "$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" = "v$K8S"
test "$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)" = "$ETCD"
echo "k8s v$K8S, staging v$STG, etcd $ETCD"
