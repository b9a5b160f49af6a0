"""Scratch directories for test databases. On this machine kind the disk is mounted with
`discard`, where deleting a Postgres data directory of a few hundred test databases took
longer than many tests; tmpfs (/dev/shm) creates and deletes them at memory speed. Used
only while it has room to spare, so a small /dev/shm falls back to the temporary directory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

MEMORY = Path("/dev/shm")
ROOM = 12 * 2**30  # bytes free that /dev/shm must have: the session's databases fit twice


def scratch_dir(prefix: str) -> Path:
    """A new directory, readable by the `postgres` user, in memory when there is room."""
    in_memory = MEMORY.is_dir() and shutil.disk_usage(MEMORY).free >= ROOM
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=MEMORY if in_memory else None))
    root.chmod(0o755)  # the `postgres` user must reach the data directories inside
    return root
