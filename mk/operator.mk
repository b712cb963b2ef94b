# Operator (operator/, package popfleet_operator), its CRDs (crds/, the single source) and
# the Helm chart (charts/popfleet). `make test` runs the operator's unit and testbed tests.
PKGS += operator

OPERATOR_PYTEST_ARGS ?=

.PHONY: test-operator operator-run

test-operator: $(STAMP) testbed-bin ## operator unit + testbed tests (CRDs, chart, user story)
	$(PY) -m pytest tests/unit/operator tests/integration/operator $(OPERATOR_PYTEST_ARGS)

operator-run: $(STAMP) ## run the operator locally against $$KUBECONFIG (e.g. after testbed-up)
	POPFLEET_RESYNC_INTERVAL_S=5 $(PY) -m popfleet_operator
