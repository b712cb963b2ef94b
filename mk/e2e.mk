# End to end (e2e/scenario = package popfleet_e2e, the scenario written once; e2e/kind runs it in
# make test, e2e/local on the local testbed with make test-e2e-local; make demo: mk/demo.mk).
PKGS += e2e/scenario

E2E_PYTEST_ARGS ?=

.PHONY: test-e2e-local lint-e2e

test-e2e-local: $(STAMP) testbed-bin java ## the end-to-end story on its own testbed (e2e/local, 4-7 min)
	$(PY) -m pytest e2e/local $(E2E_PYTEST_ARGS)

lint: lint-e2e

lint-e2e: $(STAMP)
	$(VENV)/bin/mypy e2e/scenario/src e2e/local e2e/kind
