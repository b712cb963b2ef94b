# Audit jobs (spark_operator_jobs/, package popfleet_audit): PySpark needs a Java >= 17 runtime.
PKGS += spark_operator_jobs
TEST_PREREQS += java

.PHONY: java test-audit

java: ## a Java >= 17 runtime for PySpark (apt openjdk-17-jre-headless when none is found)
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -n "$$v" ] && [ "$$v" -ge 17 ]; then exit 0; fi; \
	echo "java: no Java >= 17 (found '$$v'); installing openjdk-17-jre-headless"; \
	scripts/apt-install.sh openjdk-17-jre-headless || \
	  { echo "java: could not install openjdk-17-jre-headless; PySpark needs Java >= 17" >&2; exit 1; }; \
	v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "java: still no Java >= 17 after install" >&2; exit 1; fi

test-audit: $(STAMP) java ## audit jobs: unit transforms and PySpark local[2] against live brokers
	$(PY) -m pytest tests/unit/audit tests/integration/audit $(PYTEST_ARGS)
