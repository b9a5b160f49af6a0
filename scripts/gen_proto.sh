#!/usr/bin/env bash
# Regenerates src/xmtp from proto/ (Python messages, type stubs and gRPC stubs).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
case "$PY" in /*) ;; *) PY="$PWD/$PY" ;; esac
out="${1:-src}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
rm -rf "$out/xmtp"
mkdir -p "$out"
mapfile -t files < <(cd proto && find xmtp -name '*.proto' | LC_ALL=C sort)
(cd proto && "$PY" -m grpc_tools.protoc -I. --python_out="$out" \
  --pyi_out="$out" --grpc_python_out="$out" "${files[@]}")
# Every generated folder is a regular package so setuptools ships it.
find "$out/xmtp" -type d -exec touch {}/__init__.py \;
