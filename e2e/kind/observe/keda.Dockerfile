# KEDA's operator and metrics apiserver for the kind e2e (issue 19), from the static binaries
# `make keda-bin` builds from the Go module proxy; the build context is that cache directory.
# KEDA's manifests run them as /keda and /keda-adapter, non-root (65532), read-only root.
#
#   docker build --target operator|adapter -f keda.Dockerfile -t IMAGE BIN_DIR
FROM scratch AS operator
COPY keda /keda
USER 65532:65532
ENTRYPOINT ["/keda"]

FROM scratch AS adapter
COPY keda-adapter /keda-adapter
USER 65532:65532
ENTRYPOINT ["/keda-adapter"]
