#!/usr/bin/env bash
# Regenerate the Python stubs of one of our .proto files (the one source; STYLE §14).
#
#   scripts/gen_protos.sh PROTO_ROOT PROTO PACKAGE OUT_DIR
#
#   store wire (mk/proto.mk):  broker_image/proto popbroker/store/v1/store.proto
#                              popbroker.store.wire broker_image/src/popbroker/store/wire
#   admin API  (mk/api.mk):    api/proto popfleet/admin/v1/admin.proto
#                              popfleet_api.admin.v1 api/src/popfleet_api/admin/v1
#
# The drift checks pass a temporary OUT_DIR and compare. protoc runs with -I PROTO_ROOT so
# the file registers in the descriptor pool under its full path (e.g.
# "popfleet/admin/v1/admin.proto"), never as a bare "admin.proto": the RocketMQ client
# already registers a file of that name. protoc names the Python module after that path;
# the stubs live in PACKAGE instead, so the one import of the *_pb2 module in the gRPC
# module is rewritten to PACKAGE. Output is deterministic for fixed grpcio-tools and
# mypy-protobuf versions (pinned in requirements/dev.txt).
set -euo pipefail

if [ $# -ne 4 ]; then
  sed -n '4,9p' "${BASH_SOURCE[0]}" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROTO_ROOT=$1
PROTO=$2
PACKAGE=$3
OUT=$4
PY="${PY:-$ROOT/.venv/bin/python}"
BIN="$(dirname "$PY")"
name=$(basename "$PROTO" .proto)
generated_package=$(dirname "$PROTO" | tr / .)

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$PY" -m grpc_tools.protoc \
  -I "$PROTO_ROOT" \
  --plugin=protoc-gen-mypy="$BIN/protoc-gen-mypy" \
  --plugin=protoc-gen-mypy_grpc="$BIN/protoc-gen-mypy_grpc" \
  --python_out="$WORK" --grpc_python_out="$WORK" \
  --mypy_out="$WORK" --mypy_grpc_out="$WORK" \
  "$PROTO" 2> >(grep -v '^Writing mypy to ' >&2)

mkdir -p "$OUT"
for f in "${name}_pb2.py" "${name}_pb2.pyi" "${name}_pb2_grpc.py" "${name}_pb2_grpc.pyi"; do
  sed -e "s/^from ${generated_package//./\\.} import ${name}_pb2 /from $PACKAGE import ${name}_pb2 /" \
    "$WORK/$(dirname "$PROTO")/$f" > "$OUT/$f"
done
