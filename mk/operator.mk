# Operator (operator/, package popfleet_operator), its CRDs (crds/, the single source) and
# the Helm chart (charts/popfleet). `make test` runs the operator's unit and testbed tests.
PKGS += operator

OPERATOR_PYTEST_ARGS ?=

.PHONY: test-operator operator-run

test-operator: $(STAMP) testbed-bin ## operator unit + testbed tests (CRDs, chart, user story, uninstall)
	$(PY) -m pytest tests/unit/operator tests/integration/operator tests/integration/operator_uninstall $(OPERATOR_PYTEST_ARGS)

operator-run: $(STAMP) ## run the operator locally against $$KUBECONFIG (e.g. after testbed-up)
	POPFLEET_RESYNC_INTERVAL_S=5 $(PY) -m popfleet_operator

# The chart's CRDs are generated from crds/ (the single source) and drift-checked.
CHART_CRDS := charts/popfleet/templates/crds

.PHONY: crds-chart drift-crds

crds-chart: $(STAMP) ## regenerate the chart's templated CRDs from crds/
	$(PY) operator/scripts/chart_crds.py $(CHART_CRDS)

drift: drift-crds

drift-crds: $(STAMP)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PY) operator/scripts/chart_crds.py "$$tmp"; \
	if ! diff -ru "$(CHART_CRDS)" "$$tmp"; then \
	  echo "drift: $(CHART_CRDS) differs from crds/; run 'make crds-chart'" >&2; exit 1; fi; \
	echo "drift: chart CRDs match crds/"
