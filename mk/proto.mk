# Store wire protocol: broker_image/proto is the source, the stubs in
# broker_image/src/popbroker/store/wire/ are generated and committed.
PROTO_STUBS := store_pb2.py store_pb2.pyi store_pb2_grpc.py store_pb2_grpc.pyi
PROTO_WIRE  := broker_image/src/popbroker/store/wire
GEN_STORE   = PY=$(PY) scripts/gen_protos.sh broker_image/proto popbroker/store/v1/store.proto \
	popbroker.store.wire

.PHONY: proto drift drift-proto

proto: $(STAMP) ## regenerate the gRPC/protobuf stubs from broker_image/proto
	$(GEN_STORE) $(PROTO_WIRE)

# Other component makefiles may add their own checks as further prerequisites of drift.
drift: drift-proto ## fail when committed generated files differ from their source

drift-proto: $(STAMP)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(GEN_STORE) "$$tmp"; \
	rc=0; for f in $(PROTO_STUBS); do \
	  diff -u "$(PROTO_WIRE)/$$f" "$$tmp/$$f" || rc=1; \
	done; \
	if [ $$rc -ne 0 ]; then echo "drift: stubs in $(PROTO_WIRE) are stale; run 'make proto'" >&2; exit 1; fi; \
	echo "drift: proto stubs up to date"
