"""The devnet's private cluster starts even under a directory the `postgres` user cannot enter."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from xnode.devtools.postgres import start_cluster


def test_cluster_under_private_parent_lives_in_a_linked_reachable_directory() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test checks the root path (Postgres as the `postgres` user): run as root")
    private = Path(tempfile.mkdtemp())  # mode 0700, owned by root: `postgres` cannot enter it
    data_dir = private / ".xnode" / "postgres"
    cluster = start_cluster(data_dir, fsync=False)
    try:
        assert data_dir.is_symlink()
        assert cluster.data_dir == data_dir.resolve()
        assert (cluster.data_dir / "PG_VERSION").exists()
        cluster.stop()
        again = start_cluster(data_dir, fsync=False)  # the next run finds the same cluster
        assert again.data_dir == cluster.data_dir
    finally:
        cluster.stop()
        shutil.rmtree(data_dir.resolve(), ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)
