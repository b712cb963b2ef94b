#!/usr/bin/env bash
# Regenerate the store wire stubs from broker_image/proto (the one source; STYLE §14).
#
#   scripts/gen_protos.sh            write into broker_image/src/popbroker/store/wire/
#   scripts/gen_protos.sh OUT_DIR    write the same four files into OUT_DIR (the drift check)
#
# protoc runs with -I broker_image/proto so the file registers in the descriptor pool
# as "popbroker/store/v1/store.proto" (package popbroker.store.v1), never as a bare
# "store.proto" that could clash with another project's file. protoc names the Python
# module after that path (popbroker.store.v1.store_pb2); we keep the stubs beside
# their adapters in popbroker.store.wire instead, so the one import of store_pb2 in
# the gRPC modules is rewritten to that package. Output is deterministic for fixed
# grpcio-tools and mypy-protobuf versions (pinned in requirements/dev.txt).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
BIN="$(dirname "$PY")"
OUT="${1:-$ROOT/broker_image/src/popbroker/store/wire}"
PROTO_ROOT="$ROOT/broker_image/proto"
PROTO="popbroker/store/v1/store.proto"

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
GEN="$WORK/popbroker/store/v1"
for f in store_pb2.py store_pb2.pyi store_pb2_grpc.py store_pb2_grpc.pyi; do
  sed -e 's/^from popbroker\.store\.v1 import store_pb2 /from popbroker.store.wire import store_pb2 /' \
    "$GEN/$f" > "$OUT/$f"
done
