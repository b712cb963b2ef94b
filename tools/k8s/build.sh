#!/usr/bin/env bash
# Build (or reuse) the testbed's binaries: kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and etcd from this tools module, helm via `go install`.
#
# Output: $POPFLEET_CACHE/k8s-<k8s version>-<hash>/ (default ~/.cache/popfleet), where <hash> is
# the first 12 hex digits of sha256(go.sum + `go version` + helm version), so bumping any pin
# or the toolchain builds into a fresh directory. The build is skipped when every binary exists
# and reports the pinned version. Prints the directory as its last line.
#
# Flags follow the release build (hack/lib/golang.sh, hack/lib/version.sh): CGO_ENABLED=0,
# -trimpath, -tags selinux,notest, -s -w and the version -X flags so /version, `kubectl version`
# and Helm's .Capabilities.KubeVersion see the real release instead of v0.0.0-master.
set -euo pipefail
cd "$(dirname "$0")"
export PATH=/usr/local/go/bin:$PATH
HELM_VERSION=${HELM_VERSION:-v3.17.4}
CACHE=${POPFLEET_CACHE:-$HOME/.cache/popfleet}
GO_VERSION=$(go env GOVERSION)
K8S=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)          # v1.33.13
ETCD=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)  # v3.5.21
KEY=$( { cat go.sum; echo "$GO_VERSION $HELM_VERSION"; } | sha256sum | cut -c1-12)
OUT=$CACHE/k8s-${K8S#v}-$KEY
MINOR=$(echo "$K8S" | cut -d. -f2)

versions_ok() {
  [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kube-controller-manager" ] \
    && [ -x "$OUT/kube-scheduler" ] && [ -x "$OUT/kubectl" ] && [ -x "$OUT/etcd" ] \
    && [ -x "$OUT/helm" ] || return 1
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    [ "$("$OUT/$b" --version)" = "Kubernetes $K8S" ] || return 1
  done
  # Capture first: `cmd | grep -q` under pipefail fails when grep exits before cmd (SIGPIPE).
  local out
  out=$("$OUT/kubectl" version --client 2>/dev/null) || return 1
  grep -qx "Client Version: $K8S" <<<"$out" || return 1
  out=$("$OUT/etcd" --version) || return 1
  grep -qx "etcd Version: ${ETCD#v}" <<<"$out" || return 1
  out=$("$OUT/helm" version --template '{{.Version}}') || return 1
  [ "$out" = "$HELM_VERSION" ] || return 1
}

if versions_ok; then
  echo "testbed binaries up to date" >&2
  echo "$OUT"
  exit 0
fi

mkdir -p "$OUT"
start=$(date +%s)
BUILD_DATE=$(go list -m -f '{{.Time.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
V=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  V="$V -X $pkg.gitVersion=$K8S -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
  V="$V -X $pkg.gitTreeState=clean -X $pkg.buildDate=$BUILD_DATE"
done
export CGO_ENABLED=0
echo "building kubernetes $K8S into $OUT" >&2
go build -trimpath -tags selinux,notest -ldflags "-s -w $V" -o "$OUT/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
echo "building etcd $ETCD" >&2
go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3
echo "installing helm $HELM_VERSION" >&2
# go install pkg@version ignores this module (helm's own go.mod has no replaces).
(cd / && GOBIN=$OUT GOFLAGS='' go install -trimpath \
   -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
   -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
   "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
versions_ok || { echo "built binaries do not report the pinned versions" >&2; exit 1; }
echo "built in $(( $(date +%s) - start ))s" >&2
echo "$OUT"
