# prometheus-operator's two images for the kind e2e (issue 19), under the names its bundle.yaml
# and its --prometheus-config-reloader flag give them, from the static binaries
# `make prometheus-operator-bin` builds from the Go module proxy; the build context is that
# cache directory. Nothing is pulled: both stages start from scratch.
#
#   docker build --target operator|config-reloader -f prometheus-operator.Dockerfile -t IMAGE BIN_DIR
FROM scratch AS operator
COPY operator /bin/operator
USER 65534:65534
ENTRYPOINT ["/bin/operator"]

# The operator runs this container with command /bin/prometheus-config-reloader.
FROM scratch AS config-reloader
COPY prometheus-config-reloader /bin/prometheus-config-reloader
USER 65534:65534
ENTRYPOINT ["/bin/prometheus-config-reloader"]
