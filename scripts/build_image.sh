#!/usr/bin/env bash
# `make image`: the node image (xnode:local), the anvil image (xnode-anvil:local), the
# Patroni image (xnode-patroni:local) for docker-compose.ha.yml and, where
# the official postgres:15 cannot be pulled, a Postgres image (xnode-postgres:15) for
# docker-compose.yml. Uses podman when installed (settings: docker/containers.conf), else docker.
#
# Where a registry answers, the images build on the public python:3.11-slim and compose uses
# the official postgres:15. Where none does (CI), the base is a Debian 12 root file system made
# by debootstrap from the apt mirror this machine uses, cached as a tarball in $XNODE_IMAGE_CACHE
# (default /var/cache/xnode-image as root, else $XDG_CACHE_HOME/xnode-image) and imported as
# localhost/xnode-debian-base:bookworm. Force a choice with XNODE_IMAGE_BASE=public|debootstrap.
# XNODE_IMAGES names the images to build (default: node anvil patroni postgres).
set -euo pipefail
cd "$(dirname "$0")/.."

PUBLIC_PYTHON=docker.io/library/python:3.11-slim
PUBLIC_POSTGRES=docker.io/library/postgres:15
LOCAL_BASE=localhost/xnode-debian-base:bookworm
SUITE=bookworm

log() { echo "make image: $*" >&2; }

if [[ -z "${XNODE_ENGINE:-}" ]]; then
    if command -v podman >/dev/null; then XNODE_ENGINE=podman; else XNODE_ENGINE=docker; fi
fi
command -v "$XNODE_ENGINE" >/dev/null || { log "neither podman nor docker is installed"; exit 1; }
BUILD=("$XNODE_ENGINE" build)
if [[ "$XNODE_ENGINE" == podman ]]; then
    export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/docker/containers.conf}"
    # RUN steps fail under runc's rlimits here; chroot isolation does not need them.
    # Docker format keeps the HEALTHCHECKs (OCI images drop them).
    BUILD+=(--isolation chroot --format docker)
fi
# A CA bundle for networks that intercept TLS; the images do not keep it (docker/Dockerfile).
CA_FILE="${XNODE_BUILD_CA_FILE:-/etc/ssl/certs/ca-certificates.crt}"
[[ -s "$CA_FILE" ]] && BUILD+=(--secret "id=ca,src=$CA_FILE")

# shellcheck source=scripts/debian_base.sh
source scripts/debian_base.sh

# Present locally, or pulled within a minute (an unreachable registry fails or hangs).
pullable() { have_image "$1" || timeout 60 "$XNODE_ENGINE" pull -q "$1" >/dev/null 2>&1; }

mode="${XNODE_IMAGE_BASE:-}"
if [[ -z "$mode" ]]; then
    if pullable "$PUBLIC_PYTHON"; then mode=public; else mode=debootstrap; fi
fi
case "$mode" in
    public) base="$PUBLIC_PYTHON" ;;
    debootstrap)
        debian_base "$SUITE" python3,python3-venv,ca-certificates "debian-$SUITE-python.tar" "$LOCAL_BASE"
        base="$LOCAL_BASE" ;;
    *) log "XNODE_IMAGE_BASE must be public or debootstrap, not $mode"; exit 1 ;;
esac
log "base: $base"

wanted() { [[ " ${XNODE_IMAGES:-node anvil patroni postgres} " == *" $1 "* ]]; }

if wanted node; then
    commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
    "${BUILD[@]}" --build-arg "BASE=$base" --build-arg "COMMIT=$commit" \
        -f docker/Dockerfile -t xnode:local .
fi
if wanted anvil; then
    "${BUILD[@]}" --build-arg "BASE=$base" -f docker/anvil.Dockerfile -t xnode-anvil:local .
fi
# Patroni, PostgreSQL and etcd from Debian's packages for docker-compose.ha.yml (docs/ha.md).
if wanted patroni; then
    "${BUILD[@]}" --build-arg "BASE=$base" -f docker/patroni.Dockerfile -t xnode-patroni:local .
fi
if ! wanted postgres; then
    log "done"
elif [[ "$mode" == public ]] && pullable "$PUBLIC_POSTGRES"; then
    log "done; docker-compose.yml uses the official $PUBLIC_POSTGRES"
else
    "${BUILD[@]}" --build-arg "BASE=$base" -f docker/postgres.Dockerfile -t xnode-postgres:15 .
    log "done; run compose with XNODE_POSTGRES_IMAGE=localhost/xnode-postgres:15"
fi
