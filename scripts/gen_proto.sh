#!/usr/bin/env bash
# Regenerates src/xmtp (upstream messages) and src/xnode_api (this node's own services) from
# proto/ (Python messages and gRPC stubs, with mypy-protobuf's type stubs for both).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
case "$PY" in /*) ;; *) PY="$PWD/$PY" ;; esac
# mypy-protobuf's protoc plugins sit beside the interpreter (the venv's bin/).
bin="$(dirname "$PY")"
out="${1:-src}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
mkdir -p "$out"
for package in xmtp xnode_api; do
  rm -rf "${out:?}/$package"
  mapfile -t files < <(cd proto && find "$package" -name '*.proto' | LC_ALL=C sort)
  (cd proto && "$PY" -m grpc_tools.protoc -I. --python_out="$out" --grpc_python_out="$out" \
    --plugin=protoc-gen-mypy="$bin/protoc-gen-mypy" --mypy_out=quiet:"$out" \
    --plugin=protoc-gen-mypy_grpc="$bin/protoc-gen-mypy_grpc" --mypy_grpc_out=quiet,only_async,generate_concrete_servicer_stubs:"$out" \
    "${files[@]}")
  # Every generated folder is a regular package so setuptools ships it.
  find "$out/$package" -type d -exec touch {}/__init__.py \;
done
