#!/usr/bin/env bash
# Build every binary a self-made kind node image needs, from the Go module proxy only:
#   kubelet kubeadm kube-proxy   k8s.io/kubernetes at the version the repo's tools/k8s pins
#   etcd                         go.etcd.io/etcd/server/v3 at the version that kubeadm expects
#   coredns                      github.com/coredns/coredns at the version that kubeadm expects
#   local-path-provisioner       github.com/rancher/local-path-provisioner (kind v0.29.0 pin)
#   crictl                       sigs.k8s.io/cri-tools (v1.34.0: older tags are not on the proxy)
#   kube-router                  github.com/cloudnativelabs/kube-router/v2 (NetworkPolicy only;
#                                v2.1.0 is the newest version the proxy serves)
#   pause                        k8s.io/kubernetes build/pause/linux/pause.c, gcc -static
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl are NOT built here:
# they are copied from the testbed cache that `make testbed-bin` (tools/k8s/build.sh) fills.
#
#   build-bins.sh OUTDIR        # prepare.sh passes ~/.cache/popfleet/kind-bin-<k8s>-<key>/bin
# Every compile runs under nice -n 10. Skips a binary that already exists in OUTDIR.
set -euo pipefail
export PATH=/usr/local/go/bin:$PATH
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$here/../../.." && pwd)
OUT=${1:?usage: build-bins.sh OUTDIR}
WORK=$(dirname "$OUT")/gobuild
mkdir -p "$OUT" "$WORK"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0
NICE=(nice -n 10)
t() { local s=$SECONDS; "$@"; echo "   ($(( SECONDS - s ))s)" >&2; }

K8S=$(cd "$REPO/tools/k8s" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
MINOR=$(echo "$K8S" | cut -d. -f2)
KSRC=$(cd "$REPO/tools/k8s" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
# kubeadm's own pins for this release (what `kubeadm config images list` prints)
CONSTS=$KSRC/cmd/kubeadm/app/constants/constants.go
ETCD_TAG=$(sed -n "s/^[[:space:]]*${MINOR}: \"\(3\.[0-9.]*-[0-9]*\)\",/\1/p" "$CONSTS" | head -1)
COREDNS=$(sed -n 's/^[[:space:]]*CoreDNSVersion = "\(v[0-9.]*\)"/\1/p' "$CONSTS")
PAUSE=$(sed -n 's/^[[:space:]]*PauseVersion = "\([0-9.]*\)"/\1/p' "$CONSTS")
ETCD=v${ETCD_TAG%-*}
LPP=${LPP:-v0.0.30}
CRICTL=${CRICTL:-v1.34.0}
KUBE_ROUTER=${KUBE_ROUTER:-v2.1.0}
echo "kubernetes $K8S, etcd $ETCD ($ETCD_TAG), coredns $COREDNS, pause $PAUSE" >&2
printf 'K8S=%s\nETCD_TAG=%s\nCOREDNS=%s\nPAUSE=%s\nLPP=%s\nCRICTL=%s\nKUBE_ROUTER=%s\n' \
  "$K8S" "$ETCD_TAG" "$COREDNS" "$PAUSE" "$LPP" "$CRICTL" "$KUBE_ROUTER" > "$OUT/versions.env"

# 1. testbed binaries (reused, never rebuilt here)
TB=$(cd "$REPO" && tools/k8s/build.sh | tail -1)
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [ -x "$OUT/$b" ] || cp "$TB/$b" "$OUT/$b"
done

# 2. kubelet, kubeadm, kube-proxy with the release's version stamps (as tools/k8s/build.sh)
if [ ! -x "$OUT/kubelet" ] || [ ! -x "$OUT/kubeadm" ] || [ ! -x "$OUT/kube-proxy" ]; then
  mkdir -p "$WORK/k8s"
  cp "$REPO/tools/k8s/go.mod" "$REPO/tools/k8s/go.sum" "$WORK/k8s/"
  # The testbed module only carries sums for the control-plane binaries; add what kubelet,
  # kubeadm and kube-proxy import (only additions: same k8s.io/* versions, checked by diff).
  (cd "$WORK/k8s" && go get "k8s.io/kubernetes/cmd/kubelet@$K8S" "k8s.io/kubernetes/cmd/kubeadm@$K8S" \
     "k8s.io/kubernetes/cmd/kube-proxy@$K8S" \
     && ! diff "$REPO/tools/k8s/go.mod" go.mod | grep '^<')
  BUILD_DATE=$(cd "$WORK/k8s" && go list -m -f '{{.Time.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
  V=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    V="$V -X $pkg.gitVersion=$K8S -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
    V="$V -X $pkg.gitTreeState=clean -X $pkg.buildDate=$BUILD_DATE"
  done
  echo "== kubelet kubeadm kube-proxy $K8S" >&2
  (cd "$WORK/k8s" && t "${NICE[@]}" go build -trimpath -tags selinux,notest -ldflags "-s -w $V" -o "$OUT/" \
     k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy)
fi

# 3. etcd at kubeadm's pin, from a throwaway module (server/v3's own replaces do not apply
#    to a dependency)
if [ ! -x "$OUT/etcd" ]; then
  echo "== etcd $ETCD" >&2
  rm -rf "$WORK/etcd" && mkdir -p "$WORK/etcd"
  (cd "$WORK/etcd" && go mod init popfleet.invalid/etcd >/dev/null 2>&1 \
     && go get "go.etcd.io/etcd/server/v3@$ETCD" \
     && t "${NICE[@]}" go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3)
  # (etcdctl is not built: go.etcd.io/etcd/etcdctl/v3 at this version is refused by the proxy)
fi

# 4. go install of whole modules (no replace directives in their go.mod)
gi() { # name module@version [ldflags]
  [ -x "$OUT/$1" ] && return 0
  echo "== $1 ($2)" >&2
  (cd / && GOBIN=$OUT t "${NICE[@]}" go install -trimpath -ldflags "-s -w ${3:-}" "$2")
}
gi crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL" "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL"
gi local-path-provisioner "github.com/rancher/local-path-provisioner@$LPP" \
  "-X main.VERSION=$LPP"
gi coredns "github.com/coredns/coredns@$COREDNS" \
  "-X github.com/coredns/coredns/coremain.GitCommit=$COREDNS"
gi kube-router "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER" \
  "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER"

# 5. pause, the same C file the official image is built from
if [ ! -x "$OUT/pause" ]; then
  echo "== pause $PAUSE" >&2
  t "${NICE[@]}" gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE" -o "$OUT/pause" "$KSRC/build/pause/linux/pause.c"
  strip "$OUT/pause"
fi

{
for b in kubelet kube-proxy kube-apiserver; do "$OUT/$b" --version; done
"$OUT/kubeadm" version -o short
"$OUT/kubectl" version --client
v=$("$OUT/etcd" --version); echo "${v%%$'\n'*}"   # no `| head` under pipefail (SIGPIPE)
v=$("$OUT/coredns" -version); echo "${v%%$'\n'*}"
"$OUT/crictl" --version
} >&2
du -sh "$OUT" >&2
