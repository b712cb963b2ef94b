# Local Kubernetes testbed (e2e/testbed, tools/k8s): real control plane + process kubelet, no Docker.
PKGS += e2e/testbed
# make test runs the testbed's self-tests, so it needs the binaries (built once, then cached)
TEST_PREREQS += testbed-bin

TESTBED_DIR ?= /tmp/popfleet-testbed
TESTBED_PYTEST_ARGS ?=

.PHONY: testbed-bin testbed-up testbed-down test-testbed

testbed-bin: ## build or reuse kube-apiserver/kcm/scheduler/kubectl/etcd/helm (~/.cache/popfleet)
	@tools/k8s/build.sh

testbed-up: $(STAMP) testbed-bin ## start the testbed in $(TESTBED_DIR); last line: export KUBECONFIG=...
	@$(VENV)/bin/popfleet-testbed up --run-dir $(TESTBED_DIR)

testbed-down: ## stop the testbed in $(TESTBED_DIR) (by recorded PIDs) and remove it
	@if test -x $(VENV)/bin/popfleet-testbed; then \
	  $(VENV)/bin/popfleet-testbed down --run-dir $(TESTBED_DIR); fi

test-testbed: $(STAMP) testbed-bin ## the testbed's self-tests (own testbed, or POPFLEET_TESTBED=<run dir>)
	$(PY) -m pytest e2e/testbed/tests $(TESTBED_PYTEST_ARGS)
