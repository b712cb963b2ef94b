# Other official client versions the broker is tested against, each in its own venv
# (they pin conflicting protobuf/grpc versions), cached under ~/.cache/popfleet.
ROCKETMQ_511 := $(HOME)/.cache/popfleet/rocketmq-5.1.1
TEST_PREREQS += $(ROCKETMQ_511)/.installed

.PHONY: client-5.1.1

client-5.1.1: $(ROCKETMQ_511)/.installed ## side venv with rocketmq-python-client 5.1.1 (for the version tests)

$(ROCKETMQ_511)/.installed:
	$(PYTHON) -m venv $(ROCKETMQ_511)
	$(ROCKETMQ_511)/bin/python -m pip install --quiet rocketmq-python-client==5.1.1
	touch $@
