#!/usr/bin/env bash
# Build a kind node image without any registry, the way `kind build node-image` does
# (pkg/build/nodeimage in kind v0.29.0), but with every image made locally:
#   1. component images from the binaries of build-bins.sh, tagged with the names kubeadm
#      and the manifests ask for (registry.k8s.io/kube-apiserver:<v>, .../etcd:<tag>, ...);
#   2. a build container from popfleet.local/kind-base (mk-kind-base.sh): kubeadm/kubelet/kubectl
#      in /usr/bin, crictl, /kind/version, /kind/manifests/default-{cni,storage}.yaml;
#   3. containerd started in it, every image imported into its k8s.io namespace (pinned);
#   4. docker commit -> popfleet.local/kind-node:<k8s version>.
# (`kind build node-image` itself cannot be used: it `ctr content fetch`es etcd, coredns,
# pause, kindnetd and local-path images from their registries.)
#
#   mk-node-image.sh BINDIR NODE_IMAGE   (prepare.sh passes both)
set -euo pipefail
export PATH=/usr/local/go/bin:$PATH
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${1:?usage: mk-node-image.sh BINDIR NODE_IMAGE}
KIND_VERSION=${KIND_VERSION:-v0.29.0}
BASE_IMAGE=${BASE_IMAGE:-popfleet.local/kind-base:$KIND_VERSION}
# shellcheck disable=SC1091
. "$BIN/versions.env"      # K8S ETCD_TAG COREDNS PAUSE LPP CRICTL KUBE_ROUTER
NODE_IMAGE=${2:?usage: mk-node-image.sh BINDIR NODE_IMAGE}
CNI_IMAGE=popfleet.local/cni:v2
LPP_IMAGE=popfleet.local/local-path-provisioner:$LPP
HELPER_IMAGE=popfleet.local/local-path-helper:v1
KR_IMAGE=popfleet.local/kube-router:$KUBE_ROUTER
NICE=(nice -n 10)
ctx=$(mktemp -d)
bc=""
cleanup() { [ -n "$bc" ] && docker rm -f "$bc" >/dev/null 2>&1; rm -rf "$ctx"; }
trap cleanup EXIT
step() { printf '\n== %s (%ss)\n' "$*" "$SECONDS" >&2; }

# build IMAGE from a Dockerfile under images/ with the given files in its context
img() { # tag dockerfile [build-arg...] -- files...
  local tag=$1 df=$2; shift 2
  local args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=(--build-arg "$1"); shift; done
  [ "${1:-}" = -- ] && shift
  local c
  c="$ctx/$(echo "$tag" | tr '/:' '__')"
  mkdir -p "$c"
  for f in "$@"; do cp "$f" "$c/"; done
  "${NICE[@]}" docker build -q -f "$here/images/$df" "${args[@]}" -t "$tag" "$c" 2>&1 >/dev/null \
    | grep -vE 'DEPRECATED: The legacy builder|Install the buildx|docs.docker.com/go/buildx|^$' >&2 || true
  echo "  $tag" >&2
}

step "component images"
img popfleet.local/static:bookworm static.Dockerfile
img popfleet.local/netfilter:bookworm netfilter/Dockerfile -- "$here/images/netfilter/iptables-wrapper"
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  img "registry.k8s.io/$b:$K8S" binary.Dockerfile BIN=$b -- "$BIN/$b"
done
img "registry.k8s.io/kube-proxy:$K8S" kube-proxy/Dockerfile -- "$BIN/kube-proxy"
img "registry.k8s.io/etcd:$ETCD_TAG" binary.Dockerfile BIN=etcd -- "$BIN/etcd"
img "registry.k8s.io/coredns/coredns:$COREDNS" coredns.Dockerfile -- "$BIN/coredns"
img "registry.k8s.io/pause:$PAUSE" pause.Dockerfile -- "$BIN/pause"
img "$CNI_IMAGE" cni/Dockerfile BASE=popfleet.local/netfilter:bookworm -- "$here/images/cni/popfleet-cni"
img "$LPP_IMAGE" binary.Dockerfile BIN=local-path-provisioner -- "$BIN/local-path-provisioner"
img "$KR_IMAGE" kube-router/Dockerfile -- "$BIN/kube-router"
docker tag popfleet.local/debian:bookworm "$HELPER_IMAGE"   # sh, mkdir, rm: all the helper pod runs
IMAGES=(
  "registry.k8s.io/kube-apiserver:$K8S" "registry.k8s.io/kube-controller-manager:$K8S"
  "registry.k8s.io/kube-scheduler:$K8S" "registry.k8s.io/kube-proxy:$K8S"
  "registry.k8s.io/etcd:$ETCD_TAG" "registry.k8s.io/coredns/coredns:$COREDNS"
  "registry.k8s.io/pause:$PAUSE" "$CNI_IMAGE" "$LPP_IMAGE" "$HELPER_IMAGE" "$KR_IMAGE"
)
step "docker save ${#IMAGES[@]} images"
docker save -o "$ctx/images.tar" "${IMAGES[@]}"
ls -la "$ctx/images.tar" >&2

step "manifests"
KIND_SRC=$(cd / && GOFLAGS='' go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
# kind's default storage manifest (a Go string constant), with our image names
python3 - "$KIND_SRC/pkg/build/nodeimage/const_storage.go" "$LPP_IMAGE" "$HELPER_IMAGE" \
  > "$ctx/default-storage.yaml" <<'PY'
import re, sys
src, lpp, helper = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(src).read()
body = re.search(r'const defaultStorageManifest = `(.*?)\n`\n', text, re.S).group(1) + '\n'
body = body.replace('` + storageProvisionerImage + `', lpp).replace('` + storageHelperImage + `', helper)
assert '`' not in body
sys.stdout.write(body)
PY
grep -n 'image:\|helper-image' -A1 "$ctx/default-storage.yaml" | grep -v '^--$' >&2

step "build container from $BASE_IMAGE"
bc=popfleet-node-build-$$
docker run -d --name "$bc" --entrypoint=sleep --security-opt seccomp=unconfined \
  "$BASE_IMAGE" infinity >/dev/null
for b in kubeadm kubelet kubectl; do
  docker cp "$BIN/$b" "$bc:/usr/bin/$b"
done
docker cp "$BIN/crictl" "$bc:/usr/local/bin/crictl"
docker exec "$bc" chown root:root /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl /usr/local/bin/crictl
docker exec "$bc" chmod 0755 /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl /usr/local/bin/crictl
docker exec -i "$bc" sh -c 'cat > /kind/version' <<<"$K8S"
docker exec "$bc" mkdir -p /kind/manifests
# our CNI stand-in, then kube-router for NetworkPolicies (see manifests/networkpolicy.yaml)
{ cat "$here/manifests/default-cni.yaml"
  sed "s/KUBE_ROUTER_VERSION/$KUBE_ROUTER/" "$here/manifests/networkpolicy.yaml"
} | docker exec -i "$bc" sh -c 'cat > /kind/manifests/default-cni.yaml'
docker exec -i "$bc" sh -c 'cat > /kind/manifests/default-storage.yaml' < "$ctx/default-storage.yaml"
# No CAP_SYS_RESOURCE on this host (see runc-capfilter): nothing may lower its oom_score_adj,
# so containerd must clamp pods' oom_score_adj to its own (as kind does for rootless).
docker exec "$bc" sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \
  /etc/containerd/config.toml
docker exec "$bc" grep -q 'restrict_oom_score_adj = true' /etc/containerd/config.toml
# kubeadm must agree with the images we built
docker exec "$bc" kubeadm config images list --kubernetes-version "$K8S" > "$ctx/required"
while read -r i; do
  case " ${IMAGES[*]} " in *" $i "*) ;; *) echo "kubeadm wants $i, which was not built" >&2; exit 1 ;; esac
done < "$ctx/required"

step "import images into the node's containerd"
docker exec "$bc" bash -c 'nohup containerd > /var/log/containerd-build.log 2>&1 &'
docker exec "$bc" bash -c 'for i in $(seq 1 30); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 1; done; cat /var/log/containerd-build.log; exit 1'
docker exec -i "$bc" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
  --all-platforms --no-unpack --digests - < "$ctx/images.tar"
docker exec "$bc" ctr --namespace=k8s.io images list -q | grep -v '@sha256' >&2
docker exec "$bc" pkill containerd
# (the build container's PID 1 is sleep, which does not reap: a dead containerd stays a zombie)
docker exec "$bc" bash -c 'for i in $(seq 1 30); do ps -o stat= -C containerd | grep -qv Z || exit 0; sleep 1; done; exit 1'
docker exec "$bc" rm -f /var/log/containerd-build.log

step "commit $NODE_IMAGE"
docker commit \
  --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
  --change 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""' \
  "$bc" "$NODE_IMAGE" >/dev/null
docker image ls "$NODE_IMAGE"
docker image inspect "$NODE_IMAGE" --format 'Entrypoint={{json .Config.Entrypoint}} Cmd={{json .Config.Cmd}}'
step "done"
