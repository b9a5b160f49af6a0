#!/usr/bin/env bash
# Regenerates src/xmtp from proto/ (Python messages, type stubs and gRPC stubs).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
out="${1:-src}"
rm -rf "$out/xmtp"
mkdir -p "$out"
mapfile -t files < <(cd proto && find xmtp -name '*.proto' | LC_ALL=C sort)
(cd proto && "$OLDPWD/$PY" -m grpc_tools.protoc -I. --python_out="$OLDPWD/$out" \
  --pyi_out="$OLDPWD/$out" --grpc_python_out="$OLDPWD/$out" "${files[@]}")
# Every generated folder is a regular package so setuptools ships it.
find "$out/xmtp" -type d -exec touch {}/__init__.py \;
