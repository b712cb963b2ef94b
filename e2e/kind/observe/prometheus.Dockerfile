# Prometheus for the kind e2e (issue 19), from the static binary `make prometheus-bin` builds
# from the Go module proxy; the build context is that cache directory. prometheus-operator runs
# it with its own arguments and a data volume at /prometheus.
#
#   docker build -f prometheus.Dockerfile -t IMAGE PROMETHEUS_DIR
FROM scratch
COPY prometheus /bin/prometheus
USER 65534:65534
WORKDIR /prometheus
ENTRYPOINT ["/bin/prometheus"]
