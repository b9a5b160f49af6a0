"""`workers`: N as set, or with 0 the cores this process may run on, at most 4."""

from __future__ import annotations

import os

from xnode.config import MAX_AUTO_WORKERS, Settings


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
