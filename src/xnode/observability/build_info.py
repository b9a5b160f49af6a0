"""Which xnode this is: the package version and the git commit it was built from.

The commit comes from `xnode/BUILD_COMMIT`, written into the package when an image or a
release is built (docker/Dockerfile), else from git when running from a source checkout
(an editable install), else "unknown"."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

UNKNOWN = "unknown"
_PACKAGE = Path(__file__).resolve().parent.parent
COMMIT_FILE = _PACKAGE / "BUILD_COMMIT"


@dataclass(frozen=True)
class BuildInfo:
    version: str
    commit: str

    def line(self) -> str:
        return f"xnode {self.version} (commit {self.commit})"


def _version() -> str:
    try:
        return metadata.version("xnode")
    except metadata.PackageNotFoundError:
        return UNKNOWN


def _commit() -> str:
    try:
        baked = COMMIT_FILE.read_text().strip()
    except OSError:
        baked = ""
    if baked and baked != UNKNOWN:
        return baked
    try:
        found = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=_PACKAGE,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return found.stdout.strip() or UNKNOWN


@cache
def build_info() -> BuildInfo:
    """Read once per process: the version and commit do not change while it runs."""
    return BuildInfo(_version(), _commit())
