#!/usr/bin/env bash
# Patroni and etcd (Debian packages) for `xnode devnet --ha` and the high-availability tests
# (docs/ha.md). Quick when they are present; installs what is missing otherwise.
set -euo pipefail
missing=()
command -v patroni >/dev/null || missing+=(patroni)
command -v etcd >/dev/null || missing+=(etcd-server)
# Patroni talks to etcd through python-etcd, which apt may not pick among its alternatives.
/usr/bin/python3 -c 'import etcd' 2>/dev/null || missing+=(python3-etcd)
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
	echo "high availability needs ${missing[*]} (Debian packages); install them by hand" >&2
	exit 0
fi
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
"${sudo[@]}" apt-get update
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y "${missing[@]}"
