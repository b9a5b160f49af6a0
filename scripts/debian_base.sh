# Sourced by scripts/build_image.sh and scripts/build_node_sdk_image.sh: a Debian base image
# made by debootstrap from the apt mirror this machine uses (no image registry needed),
# cached as a tarball in $XNODE_IMAGE_CACHE so later runs only `podman import` it.
# Needs XNODE_ENGINE and a log function from the caller.

if [[ -z "${XNODE_IMAGE_CACHE:-}" ]]; then
    if [[ $EUID -eq 0 ]]; then XNODE_IMAGE_CACHE=/var/cache/xnode-image
    else XNODE_IMAGE_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/xnode-image"; fi
fi

have_image() { "$XNODE_ENGINE" image inspect "$1" >/dev/null 2>&1; }

apt_mirror() {
    local uri
    uri=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* \
        | grep -oE 'https?://[^ ]+/debian/?( |$)' | head -n1 | tr -d ' ')
    echo "${uri:-http://deb.debian.org/debian}"
}

# debian_base SUITE INCLUDE TARBALL_NAME IMAGE: the root file system of SUITE (minbase plus
# the comma-separated INCLUDE packages), made once per machine and imported as IMAGE.
debian_base() {
    local suite=$1 include=$2 tarball="$XNODE_IMAGE_CACHE/$3" image=$4 root
    if [[ ! -s "$tarball" ]]; then
        command -v debootstrap >/dev/null || { log "debootstrap is required"; exit 1; }
        [[ -e "/usr/share/debootstrap/scripts/$suite" ]] \
            || { log "this debootstrap does not know $suite (upgrade debootstrap)"; exit 1; }
        mkdir -p "$XNODE_IMAGE_CACHE"
        root=$(mktemp -d "$XNODE_IMAGE_CACHE/rootfs.XXXXXX")
        log "debootstrap $suite from $(apt_mirror) into $root"
        debootstrap --variant=minbase --include="$include" "$suite" "$root" "$(apt_mirror)" >&2
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        rm -rf "$root"
    fi
    if ! have_image "$image"; then
        log "importing $tarball as $image"
        "$XNODE_ENGINE" import "$tarball" "$image" >/dev/null
    fi
}
