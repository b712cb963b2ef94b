# Peer brokers for the benchmarks and their harness tests, installed up front so no test has to
# run apt-get or go build inside its own timeout on a fresh machine:
#   nats-server, redis-server  Debian packages (bench/pop_peers, bench/pop_peers_loadgen)
#   the Go load generator      bench/loadgen, built into ~/.cache/popfleet/loadgen-<hash>
#   Apache RocketMQ 5.3.3      Maven Central jars in ~/.cache/popfleet/rocketmq-5.3.3 (bench only)
TEST_PREREQS += peer-servers peer-loadgen
BENCH_PREREQS += peer-servers peer-loadgen peer-rocketmq

# The Go toolchain lives here on our machines and in CI; make puts it on PATH for these targets
# (and their prerequisites), so a shell without it still builds the load generator.
GO_BIN_DIR ?= /usr/local/go/bin
bench test test-pytest test-integration peer-loadgen lint lint-go: export PATH := $(GO_BIN_DIR):$(PATH)

.PHONY: peer-servers peer-loadgen peer-rocketmq lint-go

lint: lint-go
lint-go: ## gofmt of the Go code (bench/loadgen, broker_image/front); go vet runs with its build
	@unformatted=$$(gofmt -l bench/loadgen); if [ -n "$$unformatted" ]; then \
	  echo "gofmt: $$unformatted (run gofmt -w bench/loadgen)" >&2; exit 1; fi

peer-servers: ## nats-server and redis-server from Debian (for bench/pop_peers and its harness test)
	@command -v nats-server >/dev/null && command -v redis-server >/dev/null || \
	  scripts/apt-install.sh nats-server redis-server

peer-loadgen: $(STAMP) ## build and vet the Go load generator (bench/loadgen) into ~/.cache/popfleet
	@$(PY) -m tools.gobuild loadgen
	@cd bench/loadgen && GOFLAGS=-mod=readonly go vet ./...

peer-rocketmq: $(STAMP) java ## Apache RocketMQ 5.3.3 jars from Maven Central into ~/.cache/popfleet
	@$(PY) -m bench.peers.rocketmq
