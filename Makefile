# popfleet: the one interface for people and CI. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PKGS   := broker_image
PYTEST_ARGS ?=

# Component makefiles (testbed, operator, ...) may add to PKGS, TEST_PREREQS and BENCH_PREREQS
# and define their own targets.
TEST_PREREQS :=
BENCH_PREREQS :=
DEMO_PREREQS :=
-include mk/*.mk

export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help setup lint fmt test test-pytest test-unit test-integration bench demo clean

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | sort | \
	  awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

$(STAMP): requirements/dev.txt $(foreach p,$(PKGS),$(p)/pyproject.toml)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements/dev.txt $(foreach p,$(PKGS),-e ./$(p))
	touch $@

setup: $(STAMP) ## create .venv and install every package and dev tool

lint: $(STAMP) ## ruff, ruff format --check, mypy --strict, import-linter, dead code (vulture)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy broker_image/src api/src operator/src spark_operator_jobs/src e2e/testbed/src e2e/testbed/tests tests bench tools/gobuild.py
	$(VENV)/bin/lint-imports
	$(PY) tools/deadcode.py

fmt: $(STAMP) ## apply ruff fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: test-pytest ## every tier: pytest (fails when none are collected), then the story on kind
	@$(MAKE) --no-print-directory e2e-kind

# Two workers, each taking whole files (module fixtures stay with their tests; each worker
# starts its own testbed): the integration tiers mostly wait on processes, so the run takes
# ~11.5 instead of ~18 minutes on 2 cores. PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2

test-pytest: $(STAMP) $(TEST_PREREQS) ## every pytest tier (unit, integration, testbed); no Docker
	$(PY) -m pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

test-unit: $(STAMP) ## unit tier only
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP) ## integration tier only
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

bench: $(STAMP) $(BENCH_PREREQS) ## run the benchmarks; JSON lands in bench/results/
	$(PY) -m pip install --quiet -r requirements/bench.txt
	$(PY) -m bench.run

demo: $(STAMP) testbed-bin java $(DEMO_PREREQS) ## the user story live on a local testbed until Ctrl-C (README); demo-down stops it
	@$(VENV)/bin/popfleet-demo up --run-dir $(DEMO_DIR) \
	  --keda-bin $(KEDA_BIN) --prometheus $(POPFLEET_PROMETHEUS) $(DEMO_ARGS)

clean: ## remove the venv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
