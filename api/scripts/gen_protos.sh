#!/usr/bin/env bash
# Regenerate the admin API stubs from api/proto (the one source; STYLE §14).
#
#   api/scripts/gen_protos.sh            write into api/src/popfleet_api/admin/v1/
#   api/scripts/gen_protos.sh OUT_DIR    write the same four files into OUT_DIR (the drift check)
#
# protoc runs with -I api/proto so the file registers in the descriptor pool as
# "popfleet/admin/v1/admin.proto" (package popfleet.admin.v1), never as a bare
# "admin.proto" -- the RocketMQ client already registers a file of that name.
# protoc names the Python module after that path (popfleet.admin.v1.admin_pb2);
# the stubs live in the popfleet_api package instead, so the one import of
# admin_pb2 in the gRPC module is rewritten to popfleet_api.admin.v1. Output is
# deterministic for fixed grpcio-tools and mypy-protobuf versions (pinned in
# requirements/dev.txt).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
BIN="$(dirname "$PY")"
OUT="${1:-$ROOT/api/src/popfleet_api/admin/v1}"
PROTO_ROOT="$ROOT/api/proto"
PROTO="popfleet/admin/v1/admin.proto"

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
GEN="$WORK/popfleet/admin/v1"
for f in admin_pb2.py admin_pb2.pyi admin_pb2_grpc.py admin_pb2_grpc.pyi; do
  sed -e 's/^from popfleet\.admin\.v1 import admin_pb2 /from popfleet_api.admin.v1 import admin_pb2 /' \
    "$GEN/$f" > "$OUT/$f"
done
