# make demo (the Makefile's target): the user story live on a local testbed in $(DEMO_DIR),
# run by popfleet_e2e.demo until Ctrl-C; make demo-down stops it and the testbed (recorded PIDs).
DEMO_DIR ?= /tmp/popfleet-demo
# e.g. DEMO_ARGS=--no-elastic: skip the elastic act (KEDA), which runs when make keda-bin and
# make prometheus-bin have built KEDA and Prometheus here
DEMO_ARGS ?=

.PHONY: demo-down demo-store demo-elastic

demo-elastic: $(STAMP) keda-bin prometheus-bin ## the demo's elastic act (KEDA, PULL vs POP) alone, on the testbed of a running make demo
	@$(VENV)/bin/popfleet-demo elastic --run-dir $(DEMO_DIR) \
	  --keda-bin $(KEDA_BIN) --prometheus $(POPFLEET_PROMETHEUS)

demo-down: ## stop make demo: its process, then its testbed (by recorded PIDs)
	@if test -x $(VENV)/bin/popfleet-demo; then \
	  $(VENV)/bin/popfleet-demo down --run-dir $(DEMO_DIR); fi

demo-store: $(STAMP) ## the store-only demo: one store role on a scratch dir (popbroker demo)
	$(VENV)/bin/popbroker demo
