"""`workers`: N as set, or with 0 the cores this process may run on, at most 4."""

from __future__ import annotations

import os
from pathlib import Path

from structlog.testing import capture_logs

from xnode.config import (
    MAX_AUTO_WORKERS,
    Settings,
    key_from,
    warn_if_readable_by_others,
    write_private,
)
from xnode.core.crypto import SigningKey


def test_workers_as_set_or_the_cores_capped() -> None:
    assert Settings(workers=3).worker_count() == 3
    assert Settings(workers=1).worker_count() == 1
    cores = len(os.sched_getaffinity(0))
    assert Settings(workers=0).worker_count() == min(cores, MAX_AUTO_WORKERS)


def test_crypto_threads_as_set_or_the_cores_shared_by_the_workers() -> None:
    cores = len(os.sched_getaffinity(0))
    assert Settings(crypto_threads=3, workers=2).crypto_thread_count() == 3
    assert Settings(workers=1).crypto_thread_count() == cores
    assert Settings(workers=cores * 2).crypto_thread_count() == 1  # never none


def test_a_key_file_others_can_read_is_warned_of_and_still_read(tmp_path: Path) -> None:
    key = SigningKey.generate()
    path = tmp_path / "node.key"
    write_private(path, key.hex())
    assert path.stat().st_mode & 0o777 == 0o600
    assert not warn_if_readable_by_others(path)
    path.chmod(0o644)
    with capture_logs() as logs:
        assert key_from(None, path) == key
    assert [e["event"] for e in logs] == ["key_file_readable_by_others"]
    assert "chmod 600" in logs[0]["detail"]


def test_write_private_narrows_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "devnet.json"
    path.write_text("{}")
    path.chmod(0o644)
    write_private(path, '{"keys": []}')
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text() == '{"keys": []}'
