#!/usr/bin/env bash
# Regenerates src/xmtp (upstream messages) and src/xnode_api (this node's own services) from
# proto/ (Python messages, type stubs and gRPC stubs).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
case "$PY" in /*) ;; *) PY="$PWD/$PY" ;; esac
out="${1:-src}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
mkdir -p "$out"
for package in xmtp xnode_api; do
  rm -rf "${out:?}/$package"
  mapfile -t files < <(cd proto && find "$package" -name '*.proto' | LC_ALL=C sort)
  (cd proto && "$PY" -m grpc_tools.protoc -I. --python_out="$out" \
    --pyi_out="$out" --grpc_python_out="$out" "${files[@]}")
  # Every generated folder is a regular package so setuptools ships it.
  find "$out/$package" -type d -exec touch {}/__init__.py \;
done
