# Admin API (popfleet_api): api/proto is the source, the stubs in
# api/src/popfleet_api/admin/v1/ are generated and committed.
PKGS += api

API_PROTO_STUBS := admin_pb2.py admin_pb2.pyi admin_pb2_grpc.py admin_pb2_grpc.pyi
API_PROTO_OUT   := api/src/popfleet_api/admin/v1
GEN_API         = PY=$(PY) scripts/gen_protos.sh api/proto popfleet/admin/v1/admin.proto \
	popfleet_api.admin.v1

.PHONY: proto-api drift-api

proto: proto-api

proto-api: $(STAMP) ## regenerate the admin API stubs from api/proto
	$(GEN_API) $(API_PROTO_OUT)

drift: drift-api

drift-api: $(STAMP)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(GEN_API) "$$tmp"; \
	rc=0; for f in $(API_PROTO_STUBS); do \
	  diff -u "$(API_PROTO_OUT)/$$f" "$$tmp/$$f" || rc=1; \
	done; \
	if [ $$rc -ne 0 ]; then echo "drift: stubs in $(API_PROTO_OUT) are stale; run 'make proto-api'" >&2; exit 1; fi; \
	echo "drift: admin API stubs up to date"
