# Prometheus and its promtool, prometheus-operator's and KEDA's CRDs (issue 19), from the Go module
# proxy, cached under ~/.cache/popfleet by version. `make test` checks the chart's rules and
# the dashboards' queries with promtool, dry-runs the chart's PodMonitors and PrometheusRule
# against those CRDs on the testbed apiserver (tests/integration/kind_static/
# test_monitoring_chart.py), and runs a real Prometheus on loopback against real brokers
# (tests/integration/monitoring/), and dry-runs the KEDA example (crds/examples/keda/); the
# tests read the paths exported below.
PROMETHEUS_VERSION        := 3.16.0
# github.com/prometheus/prometheus's module version v0.3xx.y is Prometheus 3.xx.y
PROMETHEUS_MODULE_VERSION := v0.316.0
PROM_OPERATOR_VERSION     := v0.85.0
KEDA_VERSION              := v2.21.0
PROMETHEUS_DIR                   := $(HOME)/.cache/popfleet/prometheus-$(PROMETHEUS_VERSION)
export POPFLEET_PROMETHEUS       := $(PROMETHEUS_DIR)/prometheus
export POPFLEET_PROMTOOL         := $(PROMETHEUS_DIR)/promtool
export POPFLEET_MONITORING_CRDS  := $(HOME)/.cache/popfleet/prometheus-operator-$(PROM_OPERATOR_VERSION)/crds
export POPFLEET_KEDA_CRDS        := $(HOME)/.cache/popfleet/keda-$(KEDA_VERSION)/crds
PROM_OPERATOR_BIN                := $(HOME)/.cache/popfleet/prometheus-operator-$(PROM_OPERATOR_VERSION)/bin
KEDA_BIN                         := $(HOME)/.cache/popfleet/keda-$(KEDA_VERSION)/bin
TEST_PREREQS += prometheus-bin monitoring-crds keda-crds

.PHONY: prometheus-bin monitoring-crds keda-crds prometheus-operator-bin keda-bin

prometheus-bin: ## prometheus and promtool $(PROMETHEUS_VERSION) (one go install, stripped, cached) when missing
	@test -x $(POPFLEET_PROMETHEUS) -a -x $(POPFLEET_PROMTOOL) || { \
	  echo "prometheus-bin: building Prometheus $(PROMETHEUS_VERSION) from the Go module proxy (~10 min cold, once)"; \
	  cd / && GOBIN=$(PROMETHEUS_DIR) GOFLAGS='' CGO_ENABLED=0 go install \
	    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$(PROMETHEUS_VERSION)" \
	    github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_MODULE_VERSION) \
	    github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_MODULE_VERSION); }
	@for tool in $(POPFLEET_PROMETHEUS) $(POPFLEET_PROMTOOL); do \
	  $$tool --version 2>&1 | grep -q 'version $(PROMETHEUS_VERSION)' || \
	    { echo "prometheus-bin: $$tool is not $(PROMETHEUS_VERSION)" >&2; exit 1; }; done

monitoring-crds: ## prometheus-operator $(PROM_OPERATOR_VERSION)'s PodMonitor/PrometheusRule/ServiceMonitor CRDs (module download, cached)
	@test -f $(POPFLEET_MONITORING_CRDS)/.complete || { \
	  src=$$(cd / && GOFLAGS='' go mod download -json \
	    github.com/prometheus-operator/prometheus-operator@$(PROM_OPERATOR_VERSION) \
	    | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && test -n "$$src" && \
	  mkdir -p $(POPFLEET_MONITORING_CRDS) && \
	  for kind in podmonitors prometheusrules servicemonitors; do \
	    cp "$$src/example/prometheus-operator-crd/monitoring.coreos.com_$$kind.yaml" \
	      $(POPFLEET_MONITORING_CRDS)/ || exit 1; \
	  done && touch $(POPFLEET_MONITORING_CRDS)/.complete; }

keda-crds: ## KEDA $(KEDA_VERSION)'s ScaledObject and TriggerAuthentication CRDs (module download, cached)
	@test -f $(POPFLEET_KEDA_CRDS)/.complete || { \
	  src=$$(cd / && GOFLAGS='' go mod download -json github.com/kedacore/keda/v2@$(KEDA_VERSION) \
	    | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && test -n "$$src" && \
	  mkdir -p $(POPFLEET_KEDA_CRDS) && \
	  for kind in scaledobjects triggerauthentications; do \
	    cp "$$src/config/crd/bases/keda.sh_$$kind.yaml" $(POPFLEET_KEDA_CRDS)/ || exit 1; \
	  done && touch $(POPFLEET_KEDA_CRDS)/.complete; }

# The kind observability scenario (e2e/kind/observe) runs these in pods: the binaries are built
# here, from a copy of each module (both refuse `go install @version`), and put in images there.
PROM_OPERATOR_REVISION := 2ed4172b180213b6082025237bb0c155b74b6080
PROM_VERSION_PKG       := github.com/prometheus/common/version

prometheus-operator-bin: ## prometheus-operator and prometheus-config-reloader $(PROM_OPERATOR_VERSION) (~3.5 min cold, cached)
	@test -f $(PROM_OPERATOR_BIN)/.complete || KEEP=bundle.yaml scripts/go-build-module.sh \
	  github.com/prometheus-operator/prometheus-operator@$(PROM_OPERATOR_VERSION) $(PROM_OPERATOR_BIN) \
	  "-X $(PROM_VERSION_PKG).Version=$(PROM_OPERATOR_VERSION:v%=%) -X $(PROM_VERSION_PKG).Revision=$(PROM_OPERATOR_REVISION) -X $(PROM_VERSION_PKG).Branch=$(PROM_OPERATOR_VERSION)" \
	  "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring github.com/prometheus-operator/prometheus-operator/pkg/client" \
	  ./cmd/operator ./cmd/prometheus-config-reloader

keda-bin: ## KEDA $(KEDA_VERSION)'s operator and metrics apiserver (~12 min cold, cached); no admission webhooks
	@test -f $(KEDA_BIN)/.complete || KEEP=config scripts/go-build-module.sh \
	  github.com/kedacore/keda/v2@$(KEDA_VERSION) $(KEDA_BIN) \
	  "-X github.com/kedacore/keda/v2/version.Version=$(KEDA_VERSION:v%=%) -X github.com/kedacore/keda/v2/version.GitCommit=$(KEDA_VERSION)" \
	  "" ./cmd/operator=keda ./cmd/adapter=keda-adapter
