# The npm rocketmq-client-nodejs (official gRPC 5.x client) the broker is tested against
# (tests/integration/broker/test_nodejs_client.py), installed pinned under ~/.cache/popfleet.
# The package ships compiled dist/ and proto/*_pb.js, so there is no build step; install scripts
# are skipped (the only one, protobufjs's postinstall, is a version notice whose script the
# published tarball lacks, so running it fails the install).
NODE_CLIENT_VERSION := 1.0.8
NODE_CLIENT := $(HOME)/.cache/popfleet/node-client-$(NODE_CLIENT_VERSION)
TEST_PREREQS += $(NODE_CLIENT)/.installed

.PHONY: node-client

node-client: $(NODE_CLIENT)/.installed ## npm rocketmq-client-nodejs (pinned) for the Node client test

$(NODE_CLIENT)/.installed:
	mkdir -p $(NODE_CLIENT)
	test -f $(NODE_CLIENT)/package.json || echo '{"private": true}' > $(NODE_CLIENT)/package.json
	npm install --prefix $(NODE_CLIENT) --no-audit --no-fund --ignore-scripts --save-exact \
	  rocketmq-client-nodejs@$(NODE_CLIENT_VERSION)
	node -e "require('$(NODE_CLIENT)/node_modules/rocketmq-client-nodejs')"
	touch $@
