# One static Go binary on popfleet.local/static (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, coredns, local-path-provisioner). Build context: a directory with
# the binary; --build-arg BIN=<name> DEST=<dir in the image>.
FROM popfleet.local/static:bookworm
ARG BIN
ARG DEST=/usr/local/bin
COPY ${BIN} ${DEST}/${BIN}
