# e2e on kind (e2e/kind, needs Docker) and the static checks of its pieces that `make test`
# runs everywhere (tests/integration/kind_static): helm lint/template of every values scenario,
# server-side dry-runs on the testbed apiserver, shellcheck of every shell script, hadolint and
# the Dockerfiles' pins and users, kind's own check of the cluster config. Also the generated
# CRD reference (docs/crd-reference.md).
KIND_VERSION := v0.29.0
KIND_BIN     := $(HOME)/.cache/popfleet/kind-$(KIND_VERSION)/kind
TEST_PREREQS += shellcheck kind-bin  # kind itself validates e2e/kind/kind-config.yaml in make test

.PHONY: shellcheck kind-bin e2e-kind e2e-keda e2e-nodes bench-kind crd-reference drift-crd-reference

shellcheck: ## shellcheck from Debian (make test lints every shell script with it)
	@command -v shellcheck >/dev/null || \
	  scripts/apt-install.sh shellcheck
	@command -v shellcheck >/dev/null || { echo "shellcheck is missing and did not install" >&2; exit 1; }

kind-bin: ## kind $(KIND_VERSION) (go install, cached under ~/.cache/popfleet) when missing
	@test -x $(KIND_BIN) && $(KIND_BIN) version | grep -q ' $(KIND_VERSION) ' || \
	  (cd / && GOBIN=$(dir $(KIND_BIN)) GOFLAGS='' go install sigs.k8s.io/kind@$(KIND_VERSION))
	@$(KIND_BIN) version | grep -q ' $(KIND_VERSION) ' || { echo "kind-bin: $(KIND_BIN) is not $(KIND_VERSION)" >&2; exit 1; }

e2e-kind: $(STAMP) testbed-bin kind-bin front prometheus-bin prometheus-operator-bin ## the e2e scenario on kind with images built here (needs Docker)
	KIND=$(KIND_BIN) BIN_DIR="$$($(VENV)/bin/popfleet-testbed bin)" PY=$(abspath $(PY)) \
	  PROMETHEUS_DIR=$(PROMETHEUS_DIR) PROM_OPERATOR_BIN=$(PROM_OPERATOR_BIN) \
	  e2e/kind/run.sh $(E2E_KIND_ARGS)

# Not in make test: KEDA's build costs ~12 min cold (docs/design/2026-12-07-keda-outside-ci.md).
e2e-keda: $(STAMP) testbed-bin kind-bin front prometheus-bin prometheus-operator-bin keda-bin ## consumers scaled on lag by KEDA on kind: PULL flat, POP grows (issue 19, ~10 min)
	KIND=$(KIND_BIN) BIN_DIR="$$($(VENV)/bin/popfleet-testbed bin)" PY=$(abspath $(PY)) \
	  PROMETHEUS_DIR=$(PROMETHEUS_DIR) PROM_OPERATOR_BIN=$(PROM_OPERATOR_BIN) KEDA_BIN=$(KEDA_BIN) \
	  KEDA_VERSION=$(KEDA_VERSION) \
	  POPFLEET_E2E_SCENARIO=keda e2e/kind/run.sh $(E2E_KIND_ARGS)

# Not in make test: ~4 min on 2 cores, a second cluster of four nodes (docs/design/2026-12-07-node-loss-on-kind.md).
E2E_NODES_CLUSTER ?= popfleet-nodes
E2E_NODES_WORKERS ?= 3

e2e-nodes: $(STAMP) testbed-bin kind-bin front ## a replicated set losing whole worker nodes (docker kill) on a 1 + 3 node kind cluster (issue 18)
	KIND=$(KIND_BIN) BIN_DIR="$$($(VENV)/bin/popfleet-testbed bin)" PY=$(abspath $(PY)) \
	  KIND_CLUSTER=$(E2E_NODES_CLUSTER) KIND_WORKERS=$(E2E_NODES_WORKERS) \
	  POPFLEET_E2E_SCENARIO=nodes e2e/kind/run.sh $(E2E_KIND_ARGS)

BENCH_KIND_SIZES ?= 100,500,1000

bench-kind: $(STAMP) testbed-bin kind-bin ## bench.operator_scale on kind (a cluster per size, the chart's memory limit enforced)
	KIND=$(KIND_BIN) BIN_DIR="$$($(VENV)/bin/popfleet-testbed bin)" PY=$(abspath $(PY)) \
	  e2e/kind/run.sh --bench $(BENCH_KIND_SIZES)

crd-reference: $(STAMP) ## regenerate docs/crd-reference.md from the CRD schemas in crds/
	$(PY) operator/scripts/crd_reference.py > docs/crd-reference.md

drift: drift-crd-reference

drift-crd-reference: $(STAMP)
	@if ! $(PY) operator/scripts/crd_reference.py | diff -u docs/crd-reference.md -; then \
	  echo "drift: docs/crd-reference.md differs from crds/; run 'make crd-reference'" >&2; exit 1; fi; \
	echo "drift: CRD reference matches crds/"
