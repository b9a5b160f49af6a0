#!/bin/sh
# Bundles the page and the SDK's workers into dist/ (esbuild), with the WebAssembly beside
# each (they load it as new URL("bindings_wasm_bg.wasm", import.meta.url)).
set -e
cd "$(dirname "$0")"
[ -d node_modules/@xmtp/browser-sdk ] || npm install --no-audit --no-fund
mkdir -p dist/workers
esbuild=./node_modules/.bin/esbuild
$esbuild src/main.js --bundle --format=esm --outfile=dist/main.js --log-level=warning
for worker in client opfs; do
  $esbuild "node_modules/@xmtp/browser-sdk/dist/workers/$worker.js" --bundle --format=esm \
    --outfile="dist/workers/$worker.js" --log-level=warning
done
cp index.html dist/
wasm=node_modules/@xmtp/wasm-bindings/dist/bindings_wasm_bg.wasm
cp "$wasm" dist/ && cp "$wasm" dist/workers/
