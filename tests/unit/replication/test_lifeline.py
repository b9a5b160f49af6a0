"""The bulk verifiers' lifeline: a worker exits once the pipe's write end is closed."""

from __future__ import annotations

import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from xnode.replication import lifeline
from xnode.replication.verifiers import BulkVerifiers, start_bulk


def test_cutting_the_lifeline_ends_a_busy_worker() -> None:
    pool = BulkVerifiers(1)
    try:
        start_bulk(pool, 1)
        [worker] = pool._processes.values()
        busy = pool.submit(time.sleep, 600)  # it would outlive the test without the lifeline
        pool._lifeline.cut()  # what the kernel does when the node dies
        with pytest.raises(BrokenProcessPool):
            busy.result(timeout=60)
        # The pool's manager thread reads the worker's exit code from the fork server once;
        # a second reader racing it (worker.join here) can get EOF and 255: wait for it.
        pool.shutdown(wait=True)
        assert worker.exitcode == lifeline.ORPHANED
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
