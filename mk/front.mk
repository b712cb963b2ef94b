# popfront, the broker's compiled v2 front end (broker_image/front, Go): built into
# ~/.cache/popfleet/popfront-<hash> like the load generator (never committed), vetted and
# unit-tested before pytest runs the broker suite through it (tests/integration/broker).
TEST_PREREQS += front
BENCH_PREREQS += front
DEMO_PREREQS += front

front test test-pytest test-integration e2e-kind demo: export PATH := $(GO_BIN_DIR):$(PATH)

.PHONY: front

lint-go: lint-front
lint-front:
	@unformatted=$$(gofmt -l broker_image/front); if [ -n "$$unformatted" ]; then \
	  echo "gofmt: $$unformatted (run gofmt -w broker_image/front)" >&2; exit 1; fi

# The binary is also copied to broker_image/front/bin/ (the broker image's build copies it
# from there) and linked into the venv's bin, where the testbed's process kubelet finds the
# broker pod's `popfront` command.
front: $(STAMP) ## build, vet and unit-test popfront (broker_image/front) into ~/.cache/popfleet
	@built=$$($(PY) -m tools.gobuild popfront) && mkdir -p broker_image/front/bin \
	  && cp -f "$$built" broker_image/front/bin/popfront && ln -sf "$$built" $(VENV)/bin/popfront
	@cd broker_image/front && GOFLAGS=-mod=readonly go vet ./... && GOFLAGS=-mod=readonly go test -count=1 ./...
