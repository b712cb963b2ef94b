# Peer brokers for the benchmark and its harness test (Debian packages), installed up front so
# no test has to run apt-get inside its own timeout on a fresh machine.
TEST_PREREQS += peer-servers

.PHONY: peer-servers

peer-servers: ## nats-server and redis-server from Debian (for bench/pop_peers and its harness test)
	@command -v nats-server >/dev/null && command -v redis-server >/dev/null || \
	  scripts/apt-install.sh nats-server redis-server
