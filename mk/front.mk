# popfront, the broker's compiled v2 front end (broker_image/front, Go): built into
# ~/.cache/popfleet/popfront-<hash> like the load generator (never committed), vetted and
# unit-tested before pytest runs the broker suite through it (tests/integration/broker).
TEST_PREREQS += front
BENCH_PREREQS += front

front test test-pytest test-integration: export PATH := $(GO_BIN_DIR):$(PATH)

.PHONY: front

lint-go: lint-front
lint-front:
	@unformatted=$$(gofmt -l broker_image/front); if [ -n "$$unformatted" ]; then \
	  echo "gofmt: $$unformatted (run gofmt -w broker_image/front)" >&2; exit 1; fi

front: $(STAMP) ## build, vet and unit-test popfront (broker_image/front) into ~/.cache/popfleet
	@$(PY) -m bench.peers.loadgen popfront
	@cd broker_image/front && GOFLAGS=-mod=readonly go vet ./... && GOFLAGS=-mod=readonly go test -count=1 ./...
